import Glibc
import SandboxSystem

/// Where a bundle was found.
public enum ExtensionOrigin: Sendable, Hashable {
    /// Inside the host's own bundle (`Extensions/`): approved implicitly.
    case bundled
    /// In an external directory (system or per user): unapproved until the owner approves it.
    case external(directory: String)

    public var isBundled: Bool { self == .bundled }
}

/// One bundle found in a location, valid or not.
public struct CatalogEntry: Sendable, Hashable {
    public var path: String
    public var origin: ExtensionOrigin
    public var bundle: Result<ValidatedBundle, CatalogProblem>

    public init(path: String, origin: ExtensionOrigin, bundle: Result<ValidatedBundle, CatalogProblem>) {
        self.path = path
        self.origin = origin
        self.bundle = bundle
    }

    /// The manifest's identifier, when the manifest could be read.
    public var identifier: String? { try? bundle.get().manifest.identifier }
    public var point: String? { try? bundle.get().manifest.point }
}

/// Where an extension stands with the owner.
public enum ExtensionStatus: Sendable, Hashable, CustomStringConvertible {
    /// Valid, approved (or bundled) and enabled: hosts see it and may launch it.
    case enabled
    /// Approved (or bundled), but the owner disabled it.
    case disabled
    /// External and not approved for its current contents (`reason` says which: not yet, the
    /// executable changed, another signer, a lower version…).
    case unapproved(reason: String)
    /// Banned (by the administrator for every user, or in the user's own file): never offered
    /// nor launched, whatever approves it.
    case forbidden(reason: String)
    /// Broken, inconsistent or unsafe: never launched.
    case invalid(CatalogProblem)

    public var name: String {
        switch self {
        case .enabled: return "enabled"
        case .disabled: return "disabled"
        case .unapproved: return "unapproved"
        case .forbidden: return "forbidden"
        case .invalid: return "invalid"
        }
    }

    public var description: String {
        switch self {
        case .enabled, .disabled: return name
        case .unapproved(let reason): return "unapproved (\(reason))"
        case .forbidden(let reason): return "forbidden (\(reason))"
        case .invalid(let problem): return "invalid (\(problem))"
        }
    }
}

/// Finds bundles in their locations and weighs them against the owner's approvals.
public enum ExtensionCatalog {
    /// Every bundle (`*.appex` directory) in the host's `Extensions/` and the external
    /// directories, in that order. `onDirectory` is called for each directory before it is
    /// listed (a watcher adds its watch there first, so nothing lands unseen between the listing
    /// and the watch). `bundledPoints` are the host's points: a bundled extension for another
    /// point is invalid. A second bundle with an identifier already found is invalid (each
    /// directory's names are taken in the order of their bytes).
    public static func scan(
        _ locations: ExtensionLocations, bundledPoints: Set<String>?, onDirectory: (String) -> Void = { _ in }
    ) -> [CatalogEntry] {
        var entries: [CatalogEntry] = []
        var seen: [String: String] = [:]
        var directories: [(String, ExtensionOrigin)] = []
        if let bundled = locations.bundledDirectory { directories.append((bundled, .bundled)) }
        for directory in locations.external { directories.append((directory, .external(directory: directory))) }
        for (directory, origin) in directories {
            onDirectory(directory)
            let suffix = Array(("." + ExtensionLocations.bundleExtension).utf8)
            // Sorted by bytes: as strings, two spellings of one name ("\u{E9}" and "e\u{301}")
            // sort as equal, and which of them took an identifier first would be readdir's order.
            let names = (SystemFiles.entryBytes(directory) ?? []).filter { $0.count > suffix.count && $0.suffix(suffix.count).elementsEqual(suffix) }
                .sorted { $0.lexicographicallyPrecedes($1) }.map { (bytes: $0, text: String(decoding: $0, as: UTF8.self)) }
            for (bytes, text) in names {
                // A name must be UTF-8 to be named at all (paths are text everywhere after this).
                guard String(validating: bytes, as: UTF8.self) != nil else {
                    let shown = FilePaths.join(directory, Self.showingInvalidBytes(bytes))
                    entries.append(CatalogEntry(path: shown, origin: origin, bundle: .failure(CatalogProblem(
                        .broken, file: shown, "the bundle directory's name is not UTF-8 (bytes that are not are shown as \\xNN): a bundle's name must be valid UTF-8; rename it"))))
                    continue
                }
                let path = FilePaths.join(directory, text)
                // The bundle and every directory inside it, before it is read: a file that lands
                // in a subdirectory later (an installer filling bin/) must still be seen.
                onDirectory(path)
                var budget = 256
                forEachSubdirectory(of: path, depth: 4, budget: &budget, onDirectory)
                let known: ((String) -> Bool)? = origin.isBundled ? bundledPoints.map { points in { points.contains($0) } } : nil
                var result = BundleValidator.validate(bundleAt: path, knownPoint: known)
                // Removed since the listing: not installed, so not listed (its removal's event
                // brings a monitor back here).
                if case .failure(let problem) = result, problem.kind == .notInstalled { continue }
                if case .success(let bundle) = result {
                    if let first = seen[bundle.manifest.identifier] {
                        result = .failure(CatalogProblem(
                            .inconsistent, file: bundle.manifestPath, line: bundle.manifest.lines["identifier"] ?? 0,
                            "identifier \(bundle.manifest.identifier) is already installed at \(first) (the first one found is used)"))
                    } else {
                        seen[bundle.manifest.identifier] = path
                    }
                }
                entries.append(CatalogEntry(path: path, origin: origin, bundle: result))
            }
        }
        return entries
    }

    /// `bytes` as text, each byte of a sequence that is not UTF-8 shown as `\xNN`.
    static func showingInvalidBytes(_ bytes: [UInt8]) -> String {
        var text = ""
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded):
                text.unicodeScalars.append(Unicode.UTF8.decode(encoded))
                offset += encoded.count
            case .error(let length):
                for byte in bytes[offset..<offset + length] { text += "\\x" + String(byte, radix: 16, uppercase: true) }
                offset += length
            case .emptyInput:
                return text
            }
        }
    }

    /// Calls `body` for the directories below `path` (not following symbolic links), at most
    /// `depth` levels and `budget` directories deep.
    static func forEachSubdirectory(of path: String, depth: Int, budget: inout Int, _ body: (String) -> Void) {
        guard depth > 0 else { return }
        for name in (SystemFiles.entries(path) ?? []).sorted(by: FilePaths.precedes) {
            let child = FilePaths.join(path, name)
            var info = stat()
            guard budget > 0, lstat(child, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { continue }
            budget -= 1
            body(child)
            forEachSubdirectory(of: child, depth: depth - 1, budget: &budget, body)
        }
    }

    /// The entry's status under the user's choices `state` alone (``ExtensionDecisions`` weighs
    /// the administrator's too). External bundles with an approval are hashed (cached by
    /// fingerprint) to check that the approval still holds for their contents.
    public static func status(of entry: CatalogEntry, state: ApprovalState, hasher: ContentHasher = .shared) -> ExtensionStatus {
        ExtensionDecisions(user: state).evaluate(entry, hasher: hasher).status
    }

    /// The approval that would hold for the bundle's current contents.
    public static func currentApproval(of bundle: ValidatedBundle, hasher: ContentHasher = .shared) throws(CatalogProblem) -> ApprovalState.Approval {
        let (executable, _) = try hasher.digest(ofFileAt: bundle.executablePath)
        let (manifest, _) = try hasher.digest(ofFileAt: bundle.manifestPath)
        return ApprovalState.Approval(executable: executable, manifest: manifest)
    }

    /// The points that `host`'s declaration files in `directories` declare: the files whose
    /// `host` is that identifier or whose `bundle` is `bundle`. Files that cannot be read add
    /// nothing (the CLI lists them).
    public static func declaredPoints(host: String, bundle: String?, in directories: [String]) -> Set<String> {
        var points: Set<String> = []
        // By bytes: as strings, a host whose bundle is another spelling of the declared one
        // ("\u{E9}", "e\u{301}") would be given its points.
        func isBundle(_ path: String?) -> Bool {
            guard let path, let bundle else { return false }
            return FilePaths.isSame(path, bundle)
        }
        for file in declarations(in: directories).files where file.hostIdentifier == host || isBundle(file.bundlePath) {
            points.formUnion(file.points.map(\.name))
        }
        return points
    }

    /// The point declarations in `directories` (`*.appext`), with the files that could not be read.
    public static func declarations(in directories: [String]) -> (files: [PointDeclarationFile], problems: [CatalogProblem]) {
        var files: [PointDeclarationFile] = []
        var problems: [CatalogProblem] = []
        for directory in directories {
            // By bytes: as characters, "x\u{600}.appext" would not end in ".appext" (the mark
            // and the dot are one character), and two spellings of one name would sort as equal.
            for name in (SystemFiles.entries(directory) ?? []).sorted(by: FilePaths.precedes) where FilePaths.hasSuffix(name, "." + PointDeclarationFile.fileExtension) {
                do throws(CatalogProblem) {
                    files.append(try PointDeclarationFile.load(FilePaths.join(directory, name)))
                } catch {
                    problems.append(error)
                }
            }
        }
        return (files, problems)
    }
}
