import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxRuntime
import Synchronization

/// Identities this process's monitors issued. A launch accepts a discovered identity only if it
/// is one of these, equal in every field (identifier, name, version, the point with its security
/// level and scope, the host, the executable, the bundle, the approvals file), so an identity
/// assembled or edited by other means is refused.
final class IssuedIdentities: Sendable {
    static let shared = IssuedIdentities()
    private let issued = Mutex<Set<AppExtensionIdentity>>([])

    func insert(_ identity: AppExtensionIdentity) { issued.withLock { _ = $0.insert(identity) } }
    func contains(_ identity: AppExtensionIdentity) -> Bool { issued.withLock { $0.contains(identity) } }
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
/// and what the sandbox gets (the executable that was checked, the resources, the environment).
struct LaunchAuthorization: Sendable {
    var executable: String
    /// The executable as it was checked: a sealed copy, which the sandbox execs by descriptor,
    /// so that the bytes that run are the bytes whose digest was compared with the approval.
    /// `nil` for a development identity, exec'd by path.
    var executableCopy: SealedExecutable?
    /// The bundle's resources: data, bound read-only and `noexec`.
    var resources: [MountEntry]
    var environment: [String: String]

    /// Checks `identity` now; throws ``ExtensionError/discovery(_:)`` when it may not run: a
    /// bundle or approvals file that is no longer valid as its ``CatalogProblem``
    /// (``DiscoveryError/catalog(_:)``), naming the file and line.
    static func authorize(_ identity: AppExtensionIdentity) throws(ExtensionError) -> LaunchAuthorization {
        var environment = [
            ExtensionEnvironment.identifier: identity.bundleIdentifier,
            ExtensionEnvironment.point: identity.point.name,
            ExtensionEnvironment.host: identity.hostIdentifier,
        ]
        guard case .discovered(let discovered) = identity.origin else {
            return LaunchAuthorization(executable: identity.executablePath, executableCopy: nil, resources: [], environment: environment)
        }
        let id = identity.bundleIdentifier
        try checkProvenance(identity)
        if identity.point.scope.restriction == .application && !discovered.origin.isBundled {
            throw .discovery(.refused(identifier: id, reason: "point \(identity.point.name) accepts only the host's own extensions, and this one is installed outside the host's bundle"))
        }
        let current: ValidatedBundle
        switch BundleValidator.validate(bundleAt: discovered.bundle.path) {
        case .failure(let problem): throw .discovery(.bundleNoLongerValid(problem, identifier: id))
        case .success(let bundle): current = bundle
        }
        guard current == discovered.bundle else {
            throw .discovery(.refused(identifier: id, reason: "its bundle changed since discovery (\(current.path))"))
        }
        let decisions: ExtensionDecisions
        do throws(CatalogProblem) {
            var locations = ExtensionLocations(hostBundle: nil, external: [], pointDirectories: [], stateFile: discovered.stateFile)
            locations.systemStateFile = discovered.systemStateFile
            decisions = try ExtensionDecisions.load(locations)
        } catch {
            throw .discovery(.catalog(error))
        }
        let entry = CatalogEntry(path: current.path, origin: discovered.origin, bundle: .success(current))
        let evaluation = decisions.evaluate(entry)
        switch evaluation.status {
        case .enabled: break
        case .disabled: throw .discovery(.refused(identifier: id, reason: "the owner disabled it"))
        case .unapproved(let reason): throw .discovery(.refused(identifier: id, reason: "it is not approved: \(reason)"))
        case .forbidden(let reason): throw .discovery(.refused(identifier: id, reason: "it is \(reason)"))
        case .invalid(let problem): throw .discovery(.catalog(problem))
        }
        // The file is copied once, and the copy is what is weighed and what runs: whatever is
        // renamed over the path, swapped above it or written into it after this point never runs.
        let copy: SealedExecutable
        do throws(SandboxError) {
            copy = try SealedExecutable.copy(of: current.executablePath)
        } catch {
            throw .launch(error, securityLevel: identity.point.securityLevel)
        }
        if !discovered.origin.isBundled {
            let digest: ContentDigest
            do throws(CatalogProblem) {
                (digest, _) = try ContentHasher.shared.digest(ofDescriptor: copy.descriptor.rawValue, named: current.executablePath)
            } catch {
                throw .discovery(.catalog(error))
            }
            guard evaluation.executableDigest == digest else {
                throw .discovery(.refused(identifier: id, reason: "it is not approved: the executable changed since it was approved"))
            }
        }
        var resources: [MountEntry] = []
        for resource in current.resources {
            resources.append(.bind(source: resource.real, destination: ExtensionEnvironment.resourcesDirectory + "/" + resource.relative,
                                   writable: false, optional: false))
        }
        if !resources.isEmpty { environment[ExtensionEnvironment.resources] = ExtensionEnvironment.resourcesDirectory }
        return LaunchAuthorization(executable: current.executablePath, executableCopy: copy, resources: resources, environment: environment)
    }

    /// Throws (``DiscoveryError/notDiscovered(identifier:)``) unless `identity` is
    /// development-only or one that a monitor of this process issued, unaltered in any field.
    /// Cheap: also checked before a running process is shared with a handle.
    static func checkProvenance(_ identity: AppExtensionIdentity) throws(ExtensionError) {
        guard case .discovered = identity.origin else { return }
        guard IssuedIdentities.shared.contains(identity) else {
            throw .discovery(.notDiscovered(identifier: identity.bundleIdentifier))
        }
    }
}

extension LaunchAuthorization {
    /// The sandbox a launch of `identity` runs in. Cold launches and warm launches' pre-built
    /// sandboxes (``AppExtensionProcess/prepareWarmLaunches(of:count:)``) are both described
    /// here, so that a pre-built sandbox has exactly the shape a cold launch would build.
    func sandboxConfiguration(identity: AppExtensionIdentity, policy: Policy, containers: ContainerGrant,
                              output: SandboxConfiguration.StandardStream, extensionFD: FileDescriptor?) -> SandboxConfiguration {
        var configuration = SandboxConfiguration(
            executable: executable, arguments: [executable] + identity.arguments,
            environment: SandboxEnvironment.compose(
                policy: policy, caller: ProcessInfo.processInfo.environment,
                overrides: environment.merging(containers.environment) { _, new in new }),
            policy: policy, standardInput: .null, standardOutput: output, standardError: output,
            extraFileDescriptors: extensionFD.map { [$0] } ?? [])
        configuration.executableCopy = executableCopy
        configuration.dataMounts = resources + containers.mounts
        return configuration
    }
}
