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
    let executable: ExecutableFileIdentity
    /// The policy as resolved (every `extends:`/`include:` merged): the seccomp rules, mounts,
    /// network, environment and limits the sandbox gets. Two points whose policies differ in
    /// anything (even a policy of the same name edited between launches) never share a process.
    let policy: Policy

    /// Resolves the identity's point's policy and identifies its executable now.
    init(identity: AppExtensionIdentity) throws {
        self.identity = identity
        let searchPath = PolicySearchPath.default(executablePath: PolicySearchPath.currentExecutable())
        do {
            policy = SharedPolicies.shared(try PolicyLoader.load(nameOrPath: identity.point.securityLevel, searchPath: searchPath))
        } catch {
            throw ExtensionError.policyFailed(securityLevel: identity.point.securityLevel, error: error)
        }
        do {
            executable = try ExecutableFileIdentity(path: identity.executablePath)
        } catch {
            // A discovered extension whose bundle no longer checks out (removed, say): what the
            // launch's own check would say, not the stat's errno.
            if case .discovered(let discovered) = identity.origin,
               case .failure(let problem) = BundleValidator.validate(bundleAt: discovered.bundle.path) {
                throw DiscoveryError.bundleNoLongerValid(problem, identifier: identity.bundleIdentifier)
            }
            throw error
        }
    }
}

/// An executable file as the kernel sees it: which file (device and inode) and which contents
/// (size and the modification and status-change times). Replacing the file (a new inode), or
/// rewriting it in place (new times), makes a different identity.
struct ExecutableFileIdentity: Sendable, Equatable {
    let device: UInt64
    let inode: UInt64
    let size: Int64
    let modified: timespec
    let changed: timespec

    init(path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw ExtensionError.sandboxFailed(
                SandboxError(step: .exec, errorNumber: errno, detail: "the executable \(path) cannot be read (stat)"))
        }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = info.st_mtim
        changed = info.st_ctim
    }

    static func == (a: Self, b: Self) -> Bool {
        a.device == b.device && a.inode == b.inode && a.size == b.size
            && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
            && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
    }
}
