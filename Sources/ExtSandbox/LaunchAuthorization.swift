import ExtensionCatalog
import Glibc
import SandboxPolicy
import SandboxRuntime
import Synchronization

/// Identities this process's monitors issued. A launch accepts a discovered identity only if it
/// is one of these (value equality: the same bundle, manifest, origin and approvals file), so
/// an identity assembled by other means is refused.
final class IssuedIdentities: Sendable {
    static let shared = IssuedIdentities()
    private let issued = Mutex<Set<DiscoveredExtension>>([])

    func insert(_ discovered: DiscoveredExtension) { issued.withLock { _ = $0.insert(discovered) } }
    func contains(_ discovered: DiscoveredExtension) -> Bool { issued.withLock { $0.contains(discovered) } }
}

/// Environment variables through which an extension learns who it is (docs/wire-protocol.md §7).
public enum ExtensionEnvironment {
    /// The identifier the extension must say in READY.
    public static let identifier = "EXTSANDBOX_EXTENSION_IDENTIFIER"
    /// The name of the point it was launched for.
    public static let point = "EXTSANDBOX_EXTENSION_POINT"
    /// The identifier of the host that launched it.
    public static let host = "EXTSANDBOX_HOST_IDENTIFIER"
    /// Where the bundle's resources are, read-only, inside the sandbox (when it has any).
    public static let resources = "EXTSANDBOX_EXTENSION_RESOURCES"
    /// The directory inside the sandbox where resources are bound, at their bundle-relative paths.
    public static let resourcesDirectory = "/extension"
}

/// What a launch of one identity may run, decided right before the launch: the checks of
/// discovery made again (installed, unchanged, approved for these contents, enabled, in scope),
/// and what the sandbox gets (the executable that was hashed, the resources, the environment).
struct LaunchAuthorization: Sendable {
    var executable: String
    var mounts: [MountEntry]
    var environment: [String: String]
    /// The executable's fingerprint when it was checked: the running program must be that file.
    var expectedExecutable: FileFingerprint?
    var identifier: String
    /// A `#!` script: the interpreter is the running program, the script the file it reads.
    var isScript = false

    /// Checks `identity` now; throws ``DiscoveryError`` when it may not run: a bundle or
    /// approvals file that is no longer valid as its ``CatalogProblem`` (``DiscoveryError/catalog(_:)``),
    /// naming the file and line.
    static func authorize(_ identity: AppExtensionIdentity) throws -> LaunchAuthorization {
        var environment = [
            ExtensionEnvironment.identifier: identity.bundleIdentifier,
            ExtensionEnvironment.point: identity.point.name,
            ExtensionEnvironment.host: identity.hostIdentifier,
        ]
        guard case .discovered(let discovered) = identity.origin else {
            return LaunchAuthorization(executable: identity.executablePath, mounts: [], environment: environment,
                                       expectedExecutable: nil, identifier: identity.bundleIdentifier)
        }
        let id = identity.bundleIdentifier
        try checkProvenance(identity)
        if identity.point.scope.restriction == .application && !discovered.origin.isBundled {
            throw DiscoveryError.refused(identifier: id, reason: "point \(identity.point.name) accepts only the host's own extensions, and this one is installed outside the host's bundle")
        }
        let current: ValidatedBundle
        switch BundleValidator.validate(bundleAt: discovered.bundle.path) {
        case .failure(let problem): throw DiscoveryError.catalog(problem)
        case .success(let bundle): current = bundle
        }
        guard current == discovered.bundle else {
            throw DiscoveryError.refused(identifier: id, reason: "its bundle changed since discovery (\(current.path))")
        }
        let state: ApprovalState
        do throws(CatalogProblem) {
            state = try ApprovalStore(path: discovered.stateFile).load()
        } catch {
            throw DiscoveryError.catalog(error)
        }
        let entry = CatalogEntry(path: current.path, origin: discovered.origin, bundle: .success(current))
        switch ExtensionCatalog.status(of: entry, state: state) {
        case .enabled: break
        case .disabled: throw DiscoveryError.refused(identifier: id, reason: "the owner disabled it")
        case .unapproved(let reason): throw DiscoveryError.refused(identifier: id, reason: "it is not approved: \(reason)")
        case .invalid(let problem): throw DiscoveryError.catalog(problem)
        }
        // The digests just compared (or, for a bundled extension, the file as it is now) belong to
        // this fingerprint; the program that runs must be this very file, unchanged.
        let (_, fingerprint): (ContentDigest, FileFingerprint)
        do throws(CatalogProblem) {
            (_, fingerprint) = try ContentHasher.shared.digest(ofFileAt: current.executablePath)
        } catch {
            throw DiscoveryError.catalog(error)
        }
        var mounts: [MountEntry] = []
        for resource in current.resources {
            mounts.append(.bind(source: resource.real, destination: ExtensionEnvironment.resourcesDirectory + "/" + resource.relative,
                                writable: false, optional: false))
        }
        if !mounts.isEmpty { environment[ExtensionEnvironment.resources] = ExtensionEnvironment.resourcesDirectory }
        return LaunchAuthorization(executable: current.executablePath, mounts: mounts, environment: environment,
                                   expectedExecutable: fingerprint, identifier: id, isScript: startsWithShebang(current.executablePath))
    }

    /// Throws unless `identity` is development-only or one that a monitor of this process
    /// issued, unaltered. Cheap: also checked before a running process is shared with a handle.
    static func checkProvenance(_ identity: AppExtensionIdentity) throws {
        guard case .discovered(let discovered) = identity.origin else { return }
        guard IssuedIdentities.shared.contains(discovered), identity.executablePath == discovered.bundle.executablePath,
              identity.arguments.isEmpty, identity.bundleIdentifier == discovered.bundle.manifest.identifier,
              identity.point.name == discovered.bundle.manifest.point else {
            throw DiscoveryError.notDiscovered(identifier: identity.bundleIdentifier)
        }
    }

    static func startsWithShebang(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var head: [UInt8] = [0, 0]
        return read(fd, &head, 2) == 2 && head == [0x23, 0x21]
    }

    /// After READY: the sandbox's program is the file that was checked (same device, inode,
    /// size, mtime and ctime). Closes the window between the check and the exec: a file swapped
    /// in or rewritten meanwhile is caught here, before any connection (docs/extensions.md).
    func verify(_ sandbox: SandboxedProcess) throws {
        guard let expected = expectedExecutable else { return }
        guard let payload = sandbox.processIdentifiers().dropFirst().first else {
            throw DiscoveryError.refused(identifier: identifier, reason: "its program is gone")
        }
        if FileFingerprint.of("/proc/\(payload)/exe") == expected { return }
        // A script: its interpreter runs, reading the file bound into the sandbox at this path.
        guard isScript, FileFingerprint.of("/proc/\(payload)/root" + executable) == expected else {
            throw DiscoveryError.refused(identifier: identifier, reason: "the program that started is not the file that was checked (replaced during the launch)")
        }
    }
}
