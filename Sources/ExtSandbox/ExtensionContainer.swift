import ExtensionCatalog
import Glibc
import SandboxPolicy
import SandboxRuntime
import SandboxSystem

/// How much an extension's private container may hold: bytes and inodes (files, directories,
/// links). The point gives it (``AppExtensionPoint/Container``); docs/containers.md says how it
/// is enforced and for whom.
public struct ContainerBudget: Sendable, Hashable {
    public var bytes: UInt64
    public var inodes: UInt64

    public init(bytes: UInt64, inodes: UInt64) {
        self.bytes = bytes
        self.inodes = inodes
    }
}

/// Whether the kernel bounds a running extension's private container (``AppExtensionProcess/containerBound``).
public enum ContainerBound: Sendable, Equatable {
    /// The point gives its extensions no private container.
    case noContainer
    /// Writes past the budget fail with ENOSPC (or EDQUOT) in the extension.
    case enforced(ContainerBudget)
    /// The container works but nothing stops the extension from filling the disk it lives on;
    /// `reason` says why (for example: an unprivileged caller on a machine with no file system
    /// it may mount with a size limit).
    case notEnforced(reason: String)
}

extension AppExtensionPoint {
    /// Gives each extension of the point a private container (`/container` inside,
    /// `$EXTSANDBOX_CONTAINER`) that persists across launches, bounded by `bytes` and `inodes`.
    public struct Container: AppExtensionPointDefinitionPart {
        public var budget: ContainerBudget
        public init(bytes: UInt64, inodes: UInt64) { budget = ContainerBudget(bytes: bytes, inodes: inodes) }
        public func apply(to point: inout AppExtensionPoint) { point.container = budget }
    }

    /// Gives the point's extensions the host's shared container `name` (`/shared` inside,
    /// `$EXTSANDBOX_SHARED_CONTAINER`): Apple's app group. The host finds it with
    /// ``AppExtensionHost/sharedContainer(named:)``.
    public struct SharedContainer: AppExtensionPointDefinitionPart {
        public var name: String
        public init(_ name: String) { self.name = name }
        public func apply(to point: inout AppExtensionPoint) { point.sharedContainer = name }
    }
}

extension AppExtensionHost {
    /// The path of this host's shared container `name` on the host, created (owned by the uid its
    /// extensions run as, mode 0700) when missing. The extensions of every point that declares
    /// ``AppExtensionPoint/SharedContainer`` with this name see it at `/shared`.
    ///
    /// Throws ``DiscoveryError/catalog(_:)`` for a name that is not a container's, or a
    /// container directory that is unsafe or cannot be made (the problem names the path), and
    /// ``DiscoveryError/cannotWrite(path:reason:)`` when this host's sandboxes have no ids to
    /// own it (a caller with gid 0 but without the privilege to map ids: no launch would work).
    public func sharedContainer(named name: String) throws(DiscoveryError) -> String {
        let containers = locations.containers
        let shared: String
        do throws(CatalogProblem) {
            shared = try ExtensionContainers.sharedName(name, host: identifier)
        } catch {
            throw .catalog(error)
        }
        let identity: HostIdentity
        do throws(SandboxError) {
            identity = try HostIdentity.forCaller()
        } catch {
            throw .cannotWrite(path: containers.path(of: shared), reason: "\(error)")
        }
        do throws(CatalogProblem) {
            return try containers.prepare(shared, uid: identity.uid, gid: identity.gid)
        } catch {
            throw .catalog(error)
        }
    }
}

/// Where an extension's containers are inside its sandbox, and the variables that name them.
public enum ContainerEnvironment {
    /// The private container, read-write (`noexec`: it is data).
    public static let containerDirectory = "/container"
    /// Names ``containerDirectory`` when the extension has a container.
    public static let container = "EXTSANDBOX_CONTAINER"
    /// The host's shared container, read-write (`noexec`).
    public static let sharedDirectory = "/shared"
    /// Names ``sharedDirectory`` when the extension's point declares a shared container.
    public static let shared = "EXTSANDBOX_SHARED_CONTAINER"
}

/// What a launch adds for the extension's containers: the binds, the variables, the hold that
/// keeps `extsandbox reset` off the private container while the sandbox runs, and whether its
/// budget is enforced.
struct ContainerGrant: Sendable {
    var mounts: [MountEntry] = []
    var environment: [String: String] = [:]
    /// Held (shared `flock`) until the sandbox has ended.
    var hold: FileDescriptor?
    /// A root caller's container: its image's file system, placed at the bind's source until
    /// the launch is over, and in use until the sandbox has ended.
    var placement: ContainerVolumes.Placement?
    var bound: ContainerBound = .noContainer

    /// The launch is over (whether it succeeded or not): the sandbox has its binds.
    func launched() { placement?.remove() }

    /// The sandbox has ended (or never started).
    func ended() {
        placement?.release()
        hold?.close()
    }

    /// The grant for a launch of `identity` by a caller that runs sandboxes as `host`.
    static func make(for identity: AppExtensionIdentity, host: HostIdentity) throws(DiscoveryError) -> ContainerGrant {
        var grant = ContainerGrant()
        let point = identity.point
        guard point.container != nil || point.sharedContainer != nil else { return grant }
        let directory: String
        let bundledWith: String?
        switch identity.origin {
        case .development:
            directory = ExtensionLocations.standard(hostBundle: nil).containerDirectory
            bundledWith = nil
        case .discovered(let discovered):
            directory = discovered.containerDirectory
            bundledWith = discovered.origin.isBundled ? identity.hostIdentifier : nil
        }
        let containers = ExtensionContainers(directory: directory)
        do throws(CatalogProblem) {
            if let budget = point.container {
                let name = try ExtensionContainers.name(identifier: identity.bundleIdentifier, bundledWith: bundledWith)
                grant.hold = try containers.holdWhileRunning(name)
                let path = try containers.prepare(name, uid: host.uid, gid: host.gid)
                grant.bound = bound(budget, host: host)
                if host.remapsRoot {
                    let image = try containers.prepareImage(name, bytes: budget.bytes, inodes: budget.inodes, uid: host.uid, gid: host.gid)
                    do throws(SandboxError) {
                        grant.placement = try ContainerVolumes.shared.place(image: image, at: path)
                    } catch {
                        throw CatalogProblem(.broken, file: image, "\(error)")
                    }
                }
                grant.mounts.append(.bind(source: path, destination: ContainerEnvironment.containerDirectory, writable: true, optional: false))
                grant.environment[ContainerEnvironment.container] = ContainerEnvironment.containerDirectory
            }
            if let shared = point.sharedContainer {
                let path = try containers.prepare(try ExtensionContainers.sharedName(shared, host: identity.hostIdentifier), uid: host.uid, gid: host.gid)
                grant.mounts.append(.bind(source: path, destination: ContainerEnvironment.sharedDirectory, writable: true, optional: false))
                grant.environment[ContainerEnvironment.shared] = ContainerEnvironment.sharedDirectory
            }
        } catch {
            grant.ended()
            throw .catalog(error)
        }
        return grant
    }

    /// Whether `budget` is enforced for this caller: for root, by the container's own file
    /// system (an image; a launch whose image cannot be mounted fails); for an unprivileged
    /// caller, not at all (docs/containers.md: no size-limited file system it may mount here).
    static func bound(_ budget: ContainerBudget, host: HostIdentity) -> ContainerBound {
        guard host.remapsRoot else {
            return .notEnforced(reason: "an unprivileged caller cannot mount a size-limited file system on this machine (/dev/fuse and /dev/loop-control are root's, ext4 is not mountable in a user namespace, and the file system has no project quotas): the container is not bounded")
        }
        return .enforced(budget)
    }
}
