import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxSystem

/// The host as discovery sees it: its identifier, its bundle (whose `Extensions/` holds the
/// extensions it ships) and where installed extensions and the owner's approvals live.
public struct AppExtensionHost: Sendable, Hashable {
    /// A reverse-DNS identifier; identities carry it, and extensions learn it at launch.
    public var identifier: String
    public var locations: ExtensionLocations

    /// A host with the documented locations (docs/extensions.md).
    ///
    /// With no arguments, `AppExtensionHost()` is this process as the host, as in
    /// ExtensionFoundation, where the host is the running app: its identifier is
    /// ``defaultIdentifier()`` (`$EXTSANDBOX_HOST_IDENTIFIER`, else `local.<executable name>`),
    /// its bundle `$EXTSANDBOX_HOST_BUNDLE`, else the directory of the host's executable (whose
    /// `Extensions/` holds the extensions it ships), and the other locations those of
    /// `ExtensionLocations/standard(hostBundle:environment:)` (the environment's, else the defaults). This
    /// is what ``current`` is unless a task binds another.
    public init(identifier: String? = nil, bundleDirectory: String? = nil, locations: ExtensionLocations? = nil) {
        self.identifier = identifier ?? Self.defaultIdentifier()
        let bundle = bundleDirectory ?? Self.defaultBundleDirectory()
        self.locations = locations ?? .standard(hostBundle: bundle)
        if locations != nil, let bundleDirectory { self.locations.hostBundle = bundleDirectory }
    }

    /// The host that APIs use when none is given (ExtensionFoundation's monitors have no host
    /// parameter: the host is the running app): this process, `AppExtensionHost()`, computed
    /// once. A task may bind another for the code it runs, e.g. a tool or a test that keeps its
    /// extensions elsewhere:
    ///
    /// ```swift
    /// try await AppExtensionHost.$current.withValue(AppExtensionHost(identifier: "org.example.editor", locations: mine)) {
    ///     let monitor = try await AppExtensionPoint.Monitor(appExtensionPoint: .importer)
    /// }
    /// ```
    @TaskLocal public static var current = AppExtensionHost()

    /// The identifier when none is given: `$EXTSANDBOX_HOST_IDENTIFIER`, else
    /// `local.<executable name>` (Apple's hosts are known by their bundle identifier; a Linux
    /// executable has none, so a host that publishes points or whose extensions are approved
    /// across renames sets one, by argument or in the environment).
    public static func defaultIdentifier() -> String {
        if let value = ProcessInfo.processInfo.environment["EXTSANDBOX_HOST_IDENTIFIER"], !value.isEmpty { return value }
        return "local." + FilePaths.lastComponent(PolicySearchPath.currentExecutable())
    }

    static func defaultBundleDirectory() -> String {
        if let value = ProcessInfo.processInfo.environment["EXTSANDBOX_HOST_BUNDLE"], !value.isEmpty { return value }
        let exe = SystemFiles.realPath("/proc/self/exe") ?? PolicySearchPath.currentExecutable()
        return FilePaths.directory(of: exe)
    }

    /// The declaration file (Apple's `.appext`) for these points: generated, never kept by hand.
    public func declaration(points: [AppExtensionPoint]) -> PointDeclarationFile {
        PointDeclarationFile(hostIdentifier: identifier, bundlePath: locations.hostBundle, points: points.map(\.declaration))
    }

    /// Writes the declaration file for `points` to `path` (atomically: a temporary file renamed
    /// over). Hosts do this when installed, or when asked (for example `--write-extension-points`).
    /// A file that cannot be written is ``DiscoveryError/cannotWrite(path:reason:)``, naming it.
    public func writeDeclaration(points: [AppExtensionPoint], to path: String) throws(DiscoveryError) {
        let text = declaration(points: points).rendered()
        let temporary = path + ".tmp-\(getpid())"
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: temporary))
        } catch {
            throw .cannotWrite(path: temporary, reason: "\(error)")
        }
        guard rename(temporary, path) == 0 else {
            let error = String(cString: strerror(errno))
            unlink(temporary)
            throw .cannotWrite(path: path, reason: error)
        }
    }
}
