import YAMLSupport

/// Reads the flat YAML mappings of manifests and declaration files, with the line of every
/// field for errors. Unknown keys are errors: a misspelt key must not be silently ignored.
struct ManifestFields {
    private let path: String
    private let mapping: YAMLNode.Mapping
    private(set) var seen: Set<String> = []

    /// One YAML document whose root is a mapping, from a file's bytes (UTF-8, as YAML requires:
    /// anything else is an error at its line).
    static func document(_ bytes: [UInt8], path: String) throws(CatalogProblem) -> YAMLNode {
        let root: YAMLNode?
        do {
            root = try YAMLReader.compose(utf8: bytes)
        } catch {
            var reason = error.problem
            if let context = error.context { reason = "\(context): \(reason)" }
            throw CatalogProblem(.broken, file: path, line: error.mark.line, "not valid YAML: \(reason)")
        }
        guard let root else { throw CatalogProblem(.broken, file: path, line: 1, "the file is empty") }
        return root
    }

    init(_ node: YAMLNode, path: String, allowed: Set<String>) throws(CatalogProblem) {
        guard case .mapping(let mapping) = node else {
            throw CatalogProblem(.broken, file: path, line: node.mark.line, "expected a mapping of fields")
        }
        self.path = path
        self.mapping = mapping
        var keys: Set<String> = []
        for (key, _) in mapping.entries {
            guard case .scalar(let scalar) = key else {
                throw CatalogProblem(.broken, file: path, line: key.mark.line, "a field name must be plain text")
            }
            guard allowed.contains(scalar.string) else {
                throw CatalogProblem(.broken, file: path, line: key.mark.line,
                                     "unknown field '\(scalar.string)' (expected one of: \(allowed.sorted().joined(separator: ", ")))")
            }
            guard keys.insert(scalar.string).inserted else {
                throw CatalogProblem(.broken, file: path, line: key.mark.line, "field '\(scalar.string)' appears twice")
            }
        }
    }

    var line: Int { mapping.mark.line }

    func node(_ key: String) -> YAMLNode? {
        for (k, value) in mapping.entries {
            if case .scalar(let s) = k, s.string == key { return value }
        }
        return nil
    }

    /// The line of `key`'s value, or of the mapping when it is absent.
    func line(_ key: String) -> Int { node(key)?.mark.line ?? mapping.mark.line }

    func optionalString(_ key: String) throws(CatalogProblem) -> String? {
        guard let value = node(key) else { return nil }
        guard case .scalar(let scalar) = value else {
            throw CatalogProblem(.broken, file: path, line: value.mark.line, "'\(key)' must be text")
        }
        guard !scalar.string.isEmpty else {
            throw CatalogProblem(.broken, file: path, line: value.mark.line, "'\(key)' is empty")
        }
        return scalar.string
    }

    func requiredString(_ key: String) throws(CatalogProblem) -> String {
        guard let value = try optionalString(key) else {
            throw CatalogProblem(.broken, file: path, line: mapping.mark.line, "missing '\(key)'")
        }
        return value
    }

    func optionalBool(_ key: String) throws(CatalogProblem) -> Bool? {
        guard let text = try optionalString(key) else { return nil }
        switch text {
        case "true": return true
        case "false": return false
        default: throw CatalogProblem(.broken, file: path, line: line(key), "'\(key)' must be true or false, not '\(text)'")
        }
    }

    func stringList(_ key: String) throws(CatalogProblem) -> [(String, Int)] {
        guard let value = node(key) else { return [] }
        guard case .sequence(let list) = value else {
            throw CatalogProblem(.broken, file: path, line: value.mark.line, "'\(key)' must be a list")
        }
        var out: [(String, Int)] = []
        for item in list {
            guard case .scalar(let scalar) = item, !scalar.string.isEmpty else {
                throw CatalogProblem(.broken, file: path, line: item.mark.line, "each entry of '\(key)' must be a non-empty path")
            }
            out.append((scalar.string, item.mark.line))
        }
        return out
    }

    func checkSchema(_ supported: Int) throws(CatalogProblem) {
        let text = try requiredString("schema")
        guard Int(text) == supported else {
            throw CatalogProblem(.broken, file: path, line: line("schema"),
                                 "schema \(text) is not supported (this version reads schema \(supported))")
        }
    }

    /// Reverse-DNS names: letters, digits, `-`, `_` and dots between non-empty parts.
    static func checkReverseDNS(_ name: String, what: String, path: String, line: Int) throws(CatalogProblem) {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        let valid = name.utf8.count <= 255 && parts.count >= 2 && parts.allSatisfy { part in
            !part.isEmpty && part.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c == 0x2d || c == 0x5f
            }
        }
        guard valid else {
            throw CatalogProblem(.broken, file: path, line: line,
                                 "\(what) '\(name)' is not a reverse-DNS name (letters, digits, '-', '_', dot-separated, e.g. com.example.tool)")
        }
    }
}
