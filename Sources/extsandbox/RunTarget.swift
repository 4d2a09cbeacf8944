import ExtSandbox
import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxSystem

/// The extension `extsandbox run` and `extsandbox test` launch, resolved the way a host resolves
/// it: an identity issued by a discovery monitor (`AppExtensionPoint.Monitor`), launched by
/// `AppExtensionProcess` on the host API's own path (the approvals re-checked at launch, the
/// executable's fingerprint compared after READY, the bundle's resources bound at /extension).
///
/// - An **identifier** is an installed extension (as `extsandbox list` shows it): it runs only
///   if its host would run it: approved (or bundled) and enabled.
/// - A **bundle directory** is the author's own bundle, run by path: no approval is needed
///   (the caller names the file, as with `exec`), but the bundle must be valid. It is
///   discovered from its own directory against a private approvals file, made for this run
///   and removed after it, that approves exactly its current executable and manifest.
///
/// The sandbox is the policy of the point's security level, as its host declares it
/// (installed declarations, `extsandbox list`), or `--policy`.
final class RunTarget: Sendable {
    let identity: AppExtensionIdentity
    /// What the policy came from: "the point's level" or "--policy".
    let policyOrigin: String
    /// The bundle's path.
    let bundlePath: String
    let monitor: AppExtensionPoint.Monitor
    /// The private approvals directory of a by-path run, removed by ``close()``.
    private let scratchDirectory: String?

    private init(identity: AppExtensionIdentity, policyOrigin: String, bundlePath: String,
                 monitor: AppExtensionPoint.Monitor, scratchDirectory: String?) {
        self.identity = identity
        self.policyOrigin = policyOrigin
        self.bundlePath = bundlePath
        self.monitor = monitor
        self.scratchDirectory = scratchDirectory
    }

    /// Why a target cannot be run: a message for the caller that says what to do.
    struct Refusal: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// Whether `argument` names a bundle directory rather than an identifier.
    static func isPath(_ argument: String) -> Bool {
        FilePaths.containsSlash(argument) || FilePaths.hasSuffix(argument, "." + ExtensionLocations.bundleExtension)
    }

    /// Resolves `argument` (a bundle directory or an installed identifier) with the sandbox of
    /// `policy` if given, else of its point's security level.
    static func resolve(_ argument: String, policy: String?) async throws -> RunTarget {
        let locations = ExtensionLocations.standard(hostBundle: nil)
        let inventory: ExtensionInventory
        do throws(CatalogProblem) {
            inventory = try ExtensionInventory.load(locations)
        } catch {
            throw Refusal("\(error)")
        }
        if isPath(argument) {
            return try await resolveBundle(argument, policy: policy, inventory: inventory)
        }
        return try await resolveInstalled(argument, policy: policy, inventory: inventory)
    }

    /// The point as its host declares it, with the level replaced by `policy` when given.
    private static func point(_ declaration: ExtensionPointDeclaration, policy: String?) -> AppExtensionPoint {
        AppExtensionPoint(
            name: declaration.name, hasUserInterface: declaration.hasUserInterface,
            scope: .init(restriction: declaration.restriction == .application ? .application : .none),
            securityLevel: policy ?? declaration.securityLevel)
    }

    private static func resolveInstalled(_ identifier: String, policy: String?, inventory: ExtensionInventory) async throws -> RunTarget {
        let matches = inventory.items(withIdentifier: identifier)
        guard let item = matches.first(where: { $0.status.name != "invalid" }) ?? matches.first else {
            throw Refusal("no installed extension has the identifier \(identifier) (extsandbox list --all shows every one; to run a bundle that is not installed, give its directory: extsandbox run ./\(identifier.split(separator: ".").last ?? "name").appex)")
        }
        switch item.status {
        case .invalid(let problem):
            throw Refusal("\(identifier) is invalid and cannot run: \(problem)")
        case .unapproved(let reason):
            throw Refusal("\(identifier) is not approved (\(reason)): its host would refuse to launch it. Approve it with `extsandbox approve \(identifier)`, or run its bundle by path for development: extsandbox run \(item.entry.path)")
        case .forbidden(let reason):
            throw Refusal("\(identifier) is \(reason): its host would refuse to launch it")
        case .disabled:
            throw Refusal("\(identifier) is disabled: its host would refuse to launch it. Turn it on with `extsandbox enable \(identifier)`")
        case .enabled:
            break
        }
        guard let declaration = item.point, let hostIdentifier = item.host else {
            throw Refusal("\(identifier): no installed host declares its point (extsandbox list --all)")
        }
        var locations = inventory.locations
        let hostBundle = item.entry.origin.isBundled ? FilePaths.directory(of: FilePaths.directory(of: item.entry.path)) : nil
        locations.hostBundle = hostBundle
        let host = AppExtensionHost(identifier: hostIdentifier, bundleDirectory: hostBundle, locations: locations)
        let point = point(declaration, policy: policy)
        let monitor = try await AppExtensionPoint.Monitor(points: [point], host: host)
        guard let identity = monitor.identities.first(where: { $0.bundleIdentifier == identifier }) else {
            monitor.cancel()
            throw Refusal("\(identifier) is not offered to its host \(hostIdentifier) (extsandbox list shows its state)")
        }
        return RunTarget(identity: identity, policyOrigin: policy == nil ? "the level of point \(declaration.name)" : "--policy",
                         bundlePath: item.entry.path, monitor: monitor, scratchDirectory: nil)
    }

    private static func resolveBundle(_ argument: String, policy: String?, inventory: ExtensionInventory) async throws -> RunTarget {
        var path = argument
        while path.utf8.count > 1 && path.utf8.last == UInt8(ascii: "/") { path = String(Substring(Substring(path).utf8.dropLast())) }
        if !FilePaths.isAbsolute(path) { path = FilePaths.join(SystemFiles.currentDirectory() ?? "/", path) }
        let bundle: ValidatedBundle
        switch BundleValidator.validate(bundleAt: path) {
        case .failure(let problem): throw Refusal("the bundle is invalid: \(problem)")
        case .success(let valid): bundle = valid
        }
        let name = FilePaths.lastComponent(path)
        guard FilePaths.hasSuffix(name, "." + ExtensionLocations.bundleExtension) else {
            throw Refusal("\(path): a bundle's directory name ends in .\(ExtensionLocations.bundleExtension) (rename it to \(bundle.manifest.identifier.split(separator: ".").last ?? "name").appex)")
        }
        // The point as installed hosts declare it, or one made up for --policy.
        let declared = ExtensionCatalog.declarations(in: inventory.locations.pointDirectories).files.lazy
            .compactMap { file in file.points.first { $0.name == bundle.manifest.point }.map { (file.hostIdentifier, $0) } }.first
        let point: AppExtensionPoint
        let hostIdentifier: String
        let policyOrigin: String
        if let (host, declaration) = declared {
            point = AppExtensionPoint(name: declaration.name, hasUserInterface: declaration.hasUserInterface,
                                      scope: .init(restriction: .none), securityLevel: policy ?? declaration.securityLevel)
            hostIdentifier = host
            policyOrigin = policy == nil ? "the level of point \(declaration.name)" : "--policy"
        } else if let policy {
            point = AppExtensionPoint(name: bundle.manifest.point, scope: .init(restriction: .none), securityLevel: policy)
            hostIdentifier = "local.extsandbox"
            policyOrigin = "--policy"
        } else {
            throw Refusal("no installed host declares the point \(bundle.manifest.point) (\(bundle.manifestPath):\(bundle.manifest.lines["point"] ?? 0)), so its security level is unknown: pass --policy NAME (for example --policy standard, or the level its host will declare)")
        }
        // A private approvals file that approves this bundle as it is now.
        let scratch = try makeScratchDirectory()
        let stateFile = scratch + "/approvals"
        do throws(CatalogProblem) {
            let approval = try ExtensionCatalog.currentApproval(of: bundle)
            try ApprovalStore(path: stateFile).update { $0.approvals[bundle.manifest.identifier] = approval }
        } catch {
            removeScratch(scratch)
            throw Refusal("\(error)")
        }
        let locations = ExtensionLocations(hostBundle: nil, external: [FilePaths.directory(of: path)], pointDirectories: [], stateFile: stateFile)
        let host = AppExtensionHost(identifier: hostIdentifier, bundleDirectory: nil, locations: locations)
        let monitor: AppExtensionPoint.Monitor
        do {
            monitor = try await AppExtensionPoint.Monitor(points: [point], host: host)
        } catch {
            removeScratch(scratch)
            throw error
        }
        // The monitor sees the whole directory, which others may be able to write: only the
        // identity of the named bundle is taken (its executable lies inside that bundle and no
        // other), never another bundle with the same identifier and contents but its own resources.
        guard let identity = monitor.identities.first(where: {
            $0.bundleIdentifier == bundle.manifest.identifier && FilePaths.isSame($0.executablePath, bundle.executablePath)
        }) else {
            let why = shadowingBundle(of: bundle, in: locations).map {
                "\($0), in the same directory, has its identifier \(bundle.manifest.identifier) and would be discovered "
                    + "instead (a bundle given by path runs only from the bundle named): remove or rename it, or build the "
                    + "bundle in a directory only you can write"
            } ?? monitor.state.invalid.first { FilePaths.isBelow($0.file, path) }.map { "\($0)" }
                ?? "another bundle in \(FilePaths.directory(of: path)) has the identifier \(bundle.manifest.identifier)"
            monitor.cancel()
            removeScratch(scratch)
            throw Refusal("\(path) cannot run: \(why)")
        }
        return RunTarget(identity: identity, policyOrigin: policyOrigin, bundlePath: path, monitor: monitor, scratchDirectory: scratch)
    }

    /// The other bundle in `locations` that discovery takes for `bundle`'s identifier (the first
    /// one found), if there is one. Paths by bytes: a sibling whose name is another spelling of
    /// the bundle's (the Kelvin sign and "K") is another bundle.
    private static func shadowingBundle(of bundle: ValidatedBundle, in locations: ExtensionLocations) -> String? {
        let first = ExtensionCatalog.scan(locations, bundledPoints: nil).first { $0.identifier == bundle.manifest.identifier }
        return first.flatMap { FilePaths.isSame($0.path, bundle.path) ? nil : $0.path }
    }

    /// Stops the monitor and removes what the run made.
    func close() {
        monitor.cancel()
        if let scratchDirectory { Self.removeScratch(scratchDirectory) }
    }

    private static func makeScratchDirectory() throws -> String {
        let base = SystemFiles.environment()["TMPDIR"].flatMap { FilePaths.isAbsolute($0) ? $0 : nil } ?? "/tmp"
        var template = Array(FilePaths.join(base, "extsandbox-run-XXXXXX").utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw Refusal("cannot create a temporary directory in \(base): \(String(cString: strerror(errno)))")
        }
        return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func removeScratch(_ directory: String) {
        for name in SystemFiles.entries(directory) ?? [] { unlink(FilePaths.join(directory, name)) }
        rmdir(directory)
    }
}
