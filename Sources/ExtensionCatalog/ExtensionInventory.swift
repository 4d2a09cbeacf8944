import SandboxSystem

/// Every installed extension the machine's owner can see, with its status: the external
/// locations, plus the bundled extensions of each host whose declaration file names its bundle.
/// What `extsandbox list|approve|revoke|enable|disable` work on.
public struct ExtensionInventory: Sendable {
    public struct Item: Sendable, Hashable {
        public var entry: CatalogEntry
        public var status: ExtensionStatus
        /// The host that declares the extension's point, and that point's declaration.
        public var host: String?
        public var point: ExtensionPointDeclaration?
        /// Whose decision the status follows (`nil`: nothing decided yet, or invalid).
        public var source: DecisionSource?
        /// The bundle's signature, with its signer when it verifies.
        public var signature: SignatureCheck = .unsigned
    }

    public var items: [Item]
    /// Declaration files that could not be read.
    public var declarationProblems: [CatalogProblem]
    public var locations: ExtensionLocations
    /// The user's and the administrator's decisions the statuses were weighed against.
    public var decisions: ExtensionDecisions

    /// Reads the declarations, both approvals files and every location. A broken approvals file
    /// is an error (never read as "nothing approved").
    public static func load(_ locations: ExtensionLocations) throws(CatalogProblem) -> ExtensionInventory {
        let decisions = try ExtensionDecisions.load(locations)
        let (declarations, problems) = ExtensionCatalog.declarations(in: locations.pointDirectories)
        var pointOwners: [String: (String, ExtensionPointDeclaration)] = [:]
        for file in declarations {
            for point in file.points where pointOwners[point.name] == nil { pointOwners[point.name] = (file.hostIdentifier, point) }
        }
        var items: [Item] = []
        // By bytes: two spellings of one character are two bundles.
        var seenBundles: Set<[UInt8]> = []
        func add(_ entry: CatalogEntry, host bundledHost: String?) {
            guard seenBundles.insert(Array(entry.path.utf8)).inserted else { return }
            let evaluation = decisions.evaluate(entry)
            var status = evaluation.status
            let owner = entry.point.flatMap { pointOwners[$0] }
            if case .success(let bundle) = entry.bundle, owner == nil {
                status = .invalid(CatalogProblem(
                    .inconsistent, file: bundle.manifestPath, line: bundle.manifest.lines["point"] ?? 0,
                    "unknown point \(bundle.manifest.point): no installed host declares it (declarations in \(locations.pointDirectories.joined(separator: ", ")))"))
            }
            if case .success(let bundle) = entry.bundle, let (host, point) = owner, !entry.origin.isBundled, point.restriction == .application {
                status = .invalid(CatalogProblem(
                    .inconsistent, file: bundle.manifestPath, line: bundle.manifest.lines["point"] ?? 0,
                    "point \(point.name) of \(host) accepts only the host's own extensions (scope: application)"))
            }
            items.append(Item(entry: entry, status: status, host: bundledHost ?? owner?.0, point: owner?.1,
                              source: status == evaluation.status ? evaluation.source : nil, signature: evaluation.signature))
        }
        for file in declarations {
            guard let bundlePath = file.bundlePath else { continue }
            var hostLocations = locations
            hostLocations.hostBundle = bundlePath
            hostLocations.external = []
            let points = Set(file.points.map(\.name))
            for entry in ExtensionCatalog.scan(hostLocations, bundledPoints: points) { add(entry, host: file.hostIdentifier) }
        }
        var external = locations
        external.hostBundle = nil
        for entry in ExtensionCatalog.scan(external, bundledPoints: nil) { add(entry, host: nil) }
        return ExtensionInventory(items: items, declarationProblems: problems, locations: locations, decisions: decisions)
    }

    /// The items with this identifier (a valid one first).
    public func items(withIdentifier identifier: String) -> [Item] {
        items.filter { $0.entry.identifier == identifier }
    }
}
