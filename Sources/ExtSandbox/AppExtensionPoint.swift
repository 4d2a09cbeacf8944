import ExtensionCatalog
import SandboxSystem

/// A kind of extension a host offers: a name, whether it has UI, where its extensions may come
/// from, and the security level (a policy name) its extensions run under.
///
/// As in ExtensionFoundation, a host defines its points (with ``Definition`` or the plain
/// initializer), discovers extensions for them with ``Monitor``, and publishes them in a
/// declaration file (``AppExtensionHost/writeDeclaration(points:to:)``).
public struct AppExtensionPoint: Sendable, Hashable {
    /// Where extensions for a point may come from (Apple's `Scope(restriction:)`).
    public struct Scope: Sendable, Hashable {
        public enum Restriction: Sendable, Hashable {
            /// Only extensions inside the host's own bundle (`Extensions/`). The default.
            case application
            /// Extensions installed anywhere; those outside the host's bundle start unapproved
            /// until the owner approves them.
            case none
        }

        public var restriction: Restriction

        public init(restriction: Restriction) {
            self.restriction = restriction
        }
    }

    /// A reverse-DNS name, e.g. `com.example.editor.importer`.
    public var name: String
    public var hasUserInterface: Bool
    public var scope: Scope
    /// The policy its extensions run under: `standard`, `restricted`, `hardened`, or another
    /// name on the policy search path (or a path to a policy file).
    public var securityLevel: String
    /// Each extension's private container, with its budget; `nil`: none (docs/containers.md).
    public var container: ContainerBudget?
    /// The host's shared container (Apple's app group) that the point's extensions get.
    public var sharedContainer: String?

    public init(name: String, hasUserInterface: Bool = false, scope: Scope = Scope(restriction: .application), securityLevel: String = "standard",
                container: ContainerBudget? = nil, sharedContainer: String? = nil) {
        self.name = name
        self.hasUserInterface = hasUserInterface
        self.scope = scope
        self.securityLevel = securityLevel
        self.container = container
        self.sharedContainer = sharedContainer
    }

    /// The point as its declaration file states it.
    public var declaration: ExtensionPointDeclaration {
        ExtensionPointDeclaration(
            name: name, hasUserInterface: hasUserInterface,
            restriction: scope.restriction == .application ? .application : .none, securityLevel: securityLevel,
            sharedContainer: sharedContainer)
    }
}

/// One extension, as discovery found it: its identifier, display name, version, the point it
/// supports and the host it was found for.
///
/// Hosts get identities from ``AppExtensionPoint/Monitor``; ``AppExtensionProcess`` launches
/// only those, and only while they are still installed, approved and enabled. For tests and
/// tools, ``developmentOnly(bundleIdentifier:executablePath:point:arguments:)`` runs an
/// executable by path with none of those checks.
public struct AppExtensionIdentity: Sendable, Hashable {
    /// A reverse-DNS identifier, unique per extension.
    public let bundleIdentifier: String
    /// The name the extension shows to people.
    public let displayName: String
    public let version: String
    public let point: AppExtensionPoint
    /// The identifier of the host it was discovered for.
    public let hostIdentifier: String
    /// Absolute path of the extension's executable on the host.
    public let executablePath: String
    /// Arguments after argv[0].
    public let arguments: [String]
    /// Where the identity came from: discovery (checked at every launch) or a developer.
    let origin: IdentityOrigin

    init(bundleIdentifier: String, displayName: String, version: String, point: AppExtensionPoint, hostIdentifier: String,
         executablePath: String, arguments: [String], origin: IdentityOrigin) {
        self.bundleIdentifier = bundleIdentifier
        self.displayName = displayName
        self.version = version
        self.point = point
        self.hostIdentifier = hostIdentifier
        self.executablePath = executablePath
        self.arguments = arguments
        self.origin = origin
    }

    /// **Development only**: an identity for any executable, launched without discovery,
    /// approval or scope checks (the sandbox of its point's level still applies). For tests,
    /// benchmarks and the CLI; hosts that run third-party code use ``AppExtensionPoint/Monitor``.
    public static func developmentOnly(bundleIdentifier: String, executablePath: String, point: AppExtensionPoint,
                                       arguments: [String] = []) -> AppExtensionIdentity {
        AppExtensionIdentity(
            bundleIdentifier: bundleIdentifier, displayName: bundleIdentifier, version: "0", point: point,
            hostIdentifier: AppExtensionHost.defaultIdentifier(), executablePath: executablePath, arguments: arguments,
            origin: .development)
    }

    /// Whether this identity bypasses discovery (made by ``developmentOnly(bundleIdentifier:executablePath:point:arguments:)``).
    public var isDevelopmentOnly: Bool { origin == .development }

    /// Equal in every field, the executable's path, the arguments, the point's security level
    /// (a policy's name or path) and shared container by their bytes (as the kernel gets them):
    /// a running process is shared only with an identity equal to its own, and one started from a
    /// path spelled with a precomposed "é" is no process for the same path spelled with "e" and a
    /// combining accent.
    public static func == (a: AppExtensionIdentity, b: AppExtensionIdentity) -> Bool {
        a.bundleIdentifier == b.bundleIdentifier && a.displayName == b.displayName && a.version == b.version && a.point == b.point
            && FilePaths.isSame(a.point.securityLevel, b.point.securityLevel)
            && FilePaths.isSame(a.point.sharedContainer ?? "", b.point.sharedContainer ?? "")
            && a.hostIdentifier == b.hostIdentifier && FilePaths.isSame(a.executablePath, b.executablePath)
            && FilePaths.areSame(a.arguments, b.arguments) && a.origin == b.origin
    }

    /// Hashes fields whose equal bytes make equal strings, so that equal identities hash alike.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(bundleIdentifier)
        hasher.combine(version)
        hasher.combine(hostIdentifier)
        hasher.combine(executablePath)
        hasher.combine(origin)
    }
}

/// How an identity came to be.
enum IdentityOrigin: Sendable, Hashable {
    case development
    case discovered(DiscoveredExtension)
}

/// What discovery knew about an extension when it issued its identity; launches check it again.
struct DiscoveredExtension: Sendable, Hashable {
    var bundle: ValidatedBundle
    var origin: ExtensionOrigin
    /// The approvals file it was weighed against.
    var stateFile: String
    /// The administrator's file it was weighed against.
    var systemStateFile: String
    /// Where its host keeps containers (`ExtensionLocations/containerDirectory`).
    var containerDirectory: String

    /// Files by bytes: a process launched with its container in a directory spelled with a
    /// precomposed "é" is not shared with a handle whose host keeps containers in the same name
    /// spelled with "e" and a combining accent, nor one weighed against the approvals there. (The origin's directory needs no more: the bundle's path, compared
    /// by bytes, starts with it.)
    static func == (a: DiscoveredExtension, b: DiscoveredExtension) -> Bool {
        a.bundle == b.bundle && a.origin == b.origin && FilePaths.isSame(a.stateFile, b.stateFile)
            && FilePaths.isSame(a.systemStateFile, b.systemStateFile) && FilePaths.isSame(a.containerDirectory, b.containerDirectory)
    }

    /// Hashes fields whose equal bytes make equal strings, so that equal values hash alike.
    func hash(into hasher: inout Hasher) {
        hasher.combine(bundle)
        hasher.combine(stateFile)
        hasher.combine(systemStateFile)
        hasher.combine(containerDirectory)
    }
}
