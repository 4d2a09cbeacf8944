/// A kind of extension a host offers: a name, whether it has UI, where its extensions may come
/// from, and the security level (a policy name) its extensions run under.
///
/// As in ExtensionFoundation, a host defines its points and discovers extensions for them.
public struct AppExtensionPoint: Sendable, Hashable {
    /// Where extensions for a point may be installed.
    public enum Scope: Sendable, Hashable {
        /// Only extensions inside the host's own bundle (the default).
        case bundled
        /// Extensions installed anywhere; they start unapproved until the owner approves them.
        case anywhere
    }

    /// A reverse-DNS name, e.g. `com.example.editor.importer`.
    public var name: String
    public var hasUserInterface: Bool
    public var scope: Scope
    /// The policy its extensions run under: `standard`, `restricted`, `hardened`, or another
    /// name on the policy search path (or a path to a policy file).
    public var securityLevel: String

    public init(name: String, hasUserInterface: Bool = false, scope: Scope = .bundled, securityLevel: String = "standard") {
        self.name = name
        self.hasUserInterface = hasUserInterface
        self.scope = scope
        self.securityLevel = securityLevel
    }
}

/// One extension: its identifier, its executable, and the point it supports.
///
/// Until discovery exists, hosts build identities themselves from an executable path.
public struct AppExtensionIdentity: Sendable, Hashable {
    /// A reverse-DNS identifier, unique per extension.
    public var bundleIdentifier: String
    /// Absolute path of the extension's executable on the host.
    public var executablePath: String
    public var point: AppExtensionPoint
    /// Arguments after argv[0].
    public var arguments: [String]

    public init(bundleIdentifier: String, executablePath: String, point: AppExtensionPoint, arguments: [String] = []) {
        self.bundleIdentifier = bundleIdentifier
        self.executablePath = executablePath
        self.point = point
        self.arguments = arguments
    }
}
