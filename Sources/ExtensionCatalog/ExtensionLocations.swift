import Glibc
import SandboxSystem

/// Where extensions, point declarations and the owner's approvals live (docs/extensions.md).
///
/// - Bundled extensions: `<host bundle>/Extensions/*.appex`, approved implicitly.
/// - External extensions: `/usr/local/lib/extsandbox/extensions` (system, for packages) and
///   `$XDG_DATA_HOME/extsandbox/extensions` (per user; `~/.local/share/…`), or the
///   colon-separated `$EXTSANDBOX_EXTENSION_DIRS` instead of both.
/// - Point declarations (`*.appext`): `/usr/local/lib/extsandbox/points` and
///   `$XDG_DATA_HOME/extsandbox/points`, or `$EXTSANDBOX_POINT_DIRS`.
/// - Approvals: `$XDG_STATE_HOME/extsandbox/approvals` (`~/.local/state/…`), or
///   `$EXTSANDBOX_STATE_FILE`.
/// - The administrator's decisions for every user: `/etc/extsandbox/approvals`, or
///   `$EXTSANDBOX_SYSTEM_APPROVALS`.
/// - Extensions' containers: `$XDG_DATA_HOME/extsandbox/containers`, or
///   `$EXTSANDBOX_CONTAINER_DIR` (``ExtensionContainers``).
public struct ExtensionLocations: Sendable, Hashable {
    /// The host's bundle directory (its `Extensions/` holds the bundled extensions), if any.
    public var hostBundle: String?
    /// Directories of external extension bundles, in precedence order.
    public var external: [String]
    /// Directories of hosts' point declaration files.
    public var pointDirectories: [String]
    /// The owner's approvals and enable/disable choices.
    public var stateFile: String
    /// The administrator's approvals and bans, for every user (root-owned).
    public var systemStateFile: String
    /// The directory of extensions' private and shared containers (``ExtensionContainers``).
    public var containerDirectory: String

    public static let systemExtensionDirectory = "/usr/local/lib/extsandbox/extensions"
    public static let systemPointDirectory = "/usr/local/lib/extsandbox/points"
    public static let systemApprovalsFile = "/etc/extsandbox/approvals"
    /// The directory inside a host bundle that holds its own extensions.
    public static let bundledDirectoryName = "Extensions"
    /// The name suffix of bundle directories (others are ignored: installers build a bundle
    /// under another name and rename it into place).
    public static let bundleExtension = "appex"

    /// `containerDirectory` `nil`: the documented one, with the environment's override.
    public init(hostBundle: String?, external: [String], pointDirectories: [String], stateFile: String,
                systemStateFile: String = ExtensionLocations.systemApprovalsFile, containerDirectory: String? = nil) {
        self.hostBundle = hostBundle
        self.external = external
        self.pointDirectories = pointDirectories
        self.stateFile = stateFile
        self.systemStateFile = systemStateFile
        self.containerDirectory = containerDirectory ?? Self.standardContainerDirectory(SystemFiles.environment())
    }

    /// The documented locations, with the environment's overrides.
    public static func standard(hostBundle: String?, environment: [String: String]? = nil) -> ExtensionLocations {
        let environment = environment ?? SystemFiles.environment()
        let data = dataHome(environment)
        func list(_ name: String) -> [String]? {
            guard let value = environment[name], !value.isEmpty else { return nil }
            return FilePaths.searchList(value)
        }
        let external = list("EXTSANDBOX_EXTENSION_DIRS")
            ?? [systemExtensionDirectory] + (data.map { [$0 + "/extsandbox/extensions"] } ?? [])
        let points = list("EXTSANDBOX_POINT_DIRS")
            ?? [systemPointDirectory] + (data.map { [$0 + "/extsandbox/points"] } ?? [])
        let state = environment["EXTSANDBOX_STATE_FILE"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (stateHome(environment) ?? "/nonexistent") + "/extsandbox/approvals"
        let system = environment["EXTSANDBOX_SYSTEM_APPROVALS"].flatMap { $0.isEmpty ? nil : $0 } ?? systemApprovalsFile
        return ExtensionLocations(hostBundle: hostBundle, external: external, pointDirectories: points, stateFile: state,
                                  systemStateFile: system, containerDirectory: standardContainerDirectory(environment))
    }

    /// Where `install` puts a bundle: the first external directory for `--system`, the last one
    /// (the per-user directory, in the standard locations) otherwise.
    public func installDirectory(system: Bool) -> String? { system ? external.first : external.last }

    /// `$EXTSANDBOX_CONTAINER_DIR`, else `$XDG_DATA_HOME/extsandbox/containers`.
    static func standardContainerDirectory(_ environment: [String: String]) -> String {
        if let value = environment["EXTSANDBOX_CONTAINER_DIR"], !value.isEmpty { return value }
        return (dataHome(environment) ?? "/nonexistent") + "/extsandbox/containers"
    }

    /// The containers in ``containerDirectory``.
    public var containers: ExtensionContainers { ExtensionContainers(directory: containerDirectory) }

    /// `<host bundle>/Extensions`.
    public var bundledDirectory: String? { hostBundle.map { FilePaths.join($0, Self.bundledDirectoryName) } }

    static func home(_ environment: [String: String]) -> String? {
        if let home = environment["HOME"], FilePaths.isAbsolute(home) { return home }
        guard let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir else { return nil }
        return String(cString: dir)
    }

    static func dataHome(_ environment: [String: String]) -> String? {
        if let value = environment["XDG_DATA_HOME"], FilePaths.isAbsolute(value) { return value }
        return home(environment).map { $0 + "/.local/share" }
    }

    static func stateHome(_ environment: [String: String]) -> String? {
        if let value = environment["XDG_STATE_HOME"], FilePaths.isAbsolute(value) { return value }
        return home(environment).map { $0 + "/.local/state" }
    }
}
