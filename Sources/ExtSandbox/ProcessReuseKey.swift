import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxRuntime

/// What must be the same for a new handle to share a running extension process: the identity
/// (identifier, executable path, arguments, point), the executable file itself, and the resolved
/// policy the sandbox was built from.
///
/// A process is never reused on its identifier alone: a second handle for the same identifier
/// but a stricter point (say `hardened` where the running one is `standard`), another executable,
/// or an executable replaced on disk gets a process of its own, launched under its own policy.
/// Processes that differ in any of these coexist under one identifier (the host API keeps them
/// apart; nothing on the wire depends on the identifier being unique).
struct ProcessReuseKey: Sendable, Equatable {
    let identity: AppExtensionIdentity
    /// The executable file as the kernel sees it (device, inode, size, modification and change
    /// times): replacing it (a new inode) or rewriting it in place (new times) makes another key.
    let executable: FileFingerprint
    /// The policy as resolved (every `extends:`/`include:` merged): the seccomp rules, mounts,
    /// network, environment and limits the sandbox gets. Two points whose policies differ in
    /// anything (even a policy of the same name edited between launches) never share a process.
    /// Equal policies are one value (``PolicyStore``), which every running extension shares.
    let policy: Policy

    /// Resolves the identity's point's policy (parsed again only if one of its files changed)
    /// and identifies its executable now.
    init(identity: AppExtensionIdentity) throws(ExtensionError) {
        self.identity = identity
        let searchPath = PolicySearchPath.default(executablePath: PolicySearchPath.currentExecutable())
        do {
            policy = try PolicyStore.shared.policy(nameOrPath: identity.point.securityLevel, searchPath: searchPath)
        } catch {
            throw .policyFailed(securityLevel: identity.point.securityLevel, error: error)
        }
        do throws(ExtensionError) {
            executable = try Self.fingerprint(ofExecutable: identity.executablePath)
        } catch {
            // A discovered extension whose bundle no longer checks out (removed, say): what the
            // launch's own check would say, not the stat's errno.
            if case .discovered(let discovered) = identity.origin,
               case .failure(let problem) = BundleValidator.validate(bundleAt: discovered.bundle.path) {
                throw .discovery(.bundleNoLongerValid(problem, identifier: identity.bundleIdentifier))
            }
            throw error
        }
    }

    private static func fingerprint(ofExecutable path: String) throws(ExtensionError) -> FileFingerprint {
        guard let fingerprint = FileFingerprint.of(path) else {
            throw .sandboxFailed(
                SandboxError(step: .exec, errorNumber: errno, detail: "the executable \(path) cannot be read (stat)"))
        }
        return fingerprint
    }
}
