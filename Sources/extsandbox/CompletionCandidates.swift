import ArgumentParser
import ExtensionCatalog
import Glibc
import SandboxPolicy
import SandboxSystem

/// What the shells complete for arguments that name a policy, an installed extension or a
/// bundle. The completion scripts (`--generate-completion-script`) call the CLI back for these
/// at each TAB, so they only list names: no policy is compiled and no bundle's executable hashed.
enum CompletionCandidates {
    /// `--policy` and `policy show|check`: the policy names of the search path, and `.yaml`
    /// files when the word is a path.
    static let policy = CompletionKind.custom { _, _, prefix in
        policyNames(matching: prefix, searchPath: PolicyCommand.searchPath)
    }

    /// `approve`, `revoke`, `enable`, `disable`, `forbid`, `uninstall`: the identifiers of the installed extensions.
    static let extensionIdentifier = CompletionKind.custom { _, _, prefix in
        extensionIdentifiers(matching: prefix, locations: .standard(hostBundle: nil))
    }

    /// `run` and `test`: installed identifiers, and bundle directories (`NAME.appex`).
    static let bundleOrIdentifier = CompletionKind.custom { _, _, prefix in
        bundlesOrIdentifiers(matching: prefix, locations: .standard(hostBundle: nil))
    }

    static func policyNames(matching prefix: String, searchPath: PolicySearchPath) -> [String] {
        if looksLikePath(prefix) { return paths(matching: prefix) { name, _ in FilePaths.hasSuffix(name, ".yaml") } }
        return searchPath.availablePolicies().keys.filter { $0.hasPrefix(prefix) }.sorted()
    }

    /// The identifiers of every valid bundle the owner's `list` would show, and of every
    /// extension the saved choices name (one may be revoked after its bundle is gone).
    static func extensionIdentifiers(matching prefix: String, locations: ExtensionLocations) -> [String] {
        var identifiers: Set<String> = []
        var external = locations
        external.hostBundle = nil
        var everyLocation = [external]
        for file in ExtensionCatalog.declarations(in: locations.pointDirectories).files {
            guard let bundle = file.bundlePath else { continue }
            everyLocation.append(ExtensionLocations(hostBundle: bundle, external: [], pointDirectories: locations.pointDirectories,
                                                    stateFile: locations.stateFile))
        }
        for location in everyLocation {
            for entry in ExtensionCatalog.scan(location, bundledPoints: nil) {
                if let identifier = entry.identifier { identifiers.insert(identifier) }
            }
        }
        if let state = try? ApprovalStore(path: locations.stateFile).load() {
            identifiers.formUnion(state.approvals.keys)
            identifiers.formUnion(state.signedApprovals.keys)
            identifiers.formUnion(state.disabled)
        }
        return identifiers.filter { $0.hasPrefix(prefix) }.sorted()
    }

    static func bundlesOrIdentifiers(matching prefix: String, locations: ExtensionLocations) -> [String] {
        let bundles = paths(matching: prefix) { name, _ in FilePaths.hasSuffix(name, "." + ExtensionLocations.bundleExtension) }
        if looksLikePath(prefix) { return bundles }
        return bundles + extensionIdentifiers(matching: prefix, locations: locations)
    }

    /// A word the user began as a path (an identifier or a name has no slash and no leading dot).
    static func looksLikePath(_ word: String) -> Bool {
        FilePaths.containsSlash(word) || word.hasPrefix(".")
    }

    /// The entries of the word's directory that begin as its last component does: the ones
    /// `wanted` keeps as they are, and every other directory with a slash (to descend into).
    static func paths(matching prefix: String, wanted: (_ name: String, _ isDirectory: Bool) -> Bool) -> [String] {
        let slash = prefix.lastIndex(of: "/")
        let directoryPart = slash.map { String(prefix[...$0]) } ?? ""
        let start = slash.map { String(prefix[prefix.index(after: $0)...]) } ?? prefix
        let directory = directoryPart.isEmpty ? "." : directoryPart
        var candidates: [String] = []
        for name in (SystemFiles.entries(directory) ?? []).sorted() where name.hasPrefix(start) {
            // Hidden entries only when asked for.
            if name.hasPrefix("."), !start.hasPrefix(".") { continue }
            let isDirectory = SystemFiles.kind(of: FilePaths.join(directory, name)) == S_IFDIR
            if wanted(name, isDirectory) {
                candidates.append(directoryPart + name)
            } else if isDirectory {
                candidates.append(directoryPart + name + "/")
            }
        }
        return candidates
    }
}
