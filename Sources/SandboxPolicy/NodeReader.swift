import YAMLSupport

extension YAMLNode {
    var kindName: String {
        switch self {
        case .scalar: return "a single value"
        case .mapping: return "a mapping (key: value)"
        case .sequence: return "a list"
        case .alias: return "an alias"
        }
    }

    /// A plain `~`, `null` or empty scalar: "nothing here".
    var isNull: Bool {
        guard case .scalar(let s) = self, s.style == .plain else { return false }
        return s.string.isEmpty || s.string == "~" || s.string == "null" || s.string == "Null" || s.string == "NULL"
    }
}

/// Turns YAML nodes into values, reporting every problem with its position.
/// Every scalar is read as a string and interpreted here, so `no` or `on` never become booleans.
struct NodeReader {
    let diag: Diagnostics

    func string(_ node: YAMLNode, what: String) -> String? {
        switch node {
        case .scalar(let s):
            // "\0" in a double-quoted scalar: every value ends up in a C string (a path, an
            // environment variable), which would silently end there.
            guard !s.string.utf8.contains(0) else {
                diag.error(node, "\(what) contains a NUL character (\\0)")
                return nil
            }
            return s.string
        default:
            diag.error(node, "\(what) must be a single value, found \(node.kindName)")
            return nil
        }
    }

    /// Mapping entries with string keys, in file order. Reports unknown keys (with suggestions),
    /// duplicate keys and non-scalar keys.
    func mapping(_ node: YAMLNode, what: String, keys allowed: [String]) -> [(key: String, keyLoc: Loc, value: YAMLNode)]? {
        entries(of: node, what: what, allowed: allowed)
    }

    /// Mapping entries whose keys are data (paths, errno names, variable names), in file order.
    func dataMapping(_ node: YAMLNode, what: String) -> [(key: String, keyLoc: Loc, value: YAMLNode)]? {
        if node.isNull { return [] }
        return entries(of: node, what: what, allowed: nil)
    }

    /// The entries of a mapping; keys are checked against `allowed` unless it is nil (data keys).
    private func entries(of node: YAMLNode, what: String, allowed: [String]?) -> [(key: String, keyLoc: Loc, value: YAMLNode)]? {
        guard case .mapping(let mapping) = node else {
            diag.error(node, "\(what) must be a mapping (key: value), found \(node.kindName)")
            return nil
        }
        var out: [(key: String, keyLoc: Loc, value: YAMLNode)] = []
        var seen: Set<String> = []
        for (keyNode, value) in mapping {
            guard case .scalar(let keyScalar) = keyNode else {
                diag.error(keyNode, "keys of \(what) must be \(allowed == nil ? "single values" : "plain words"), found \(keyNode.kindName)")
                continue
            }
            let key = keyScalar.string
            let loc = Loc(keyNode)
            if let allowed, !allowed.contains(key) {
                let match = diag.closest(to: key, in: allowed)
                if let match { diag.suggestedKeys.insert(match) }
                diag.error(loc, "unknown key \"\(key)\" in \(what)\(match.map(Suggest.hint(match:)) ?? "")"
                    + " (known keys: \(allowed.joined(separator: ", ")))")
                continue
            }
            guard seen.insert(key).inserted else {
                diag.error(loc, "duplicate key \"\(key)\" in \(what)")
                continue
            }
            out.append((key, loc, value))
        }
        return out
    }

    /// A list of nodes; a single scalar counts as a list of one; null as an empty list.
    func list(_ node: YAMLNode, what: String) -> [YAMLNode]? {
        if node.isNull { return [] }
        switch node {
        case .sequence(let seq): return Array(seq)
        case .scalar: return [node]
        default:
            diag.error(node, "\(what) must be a list, found \(node.kindName)")
            return nil
        }
    }

    /// A list of strings with their positions.
    func stringList(_ node: YAMLNode, what: String) -> [(String, YAMLNode)]? {
        guard let items = list(node, what: what) else { return nil }
        var out: [(String, YAMLNode)] = []
        for item in items {
            if let s = string(item, what: "an entry of \(what)") { out.append((s, item)) }
        }
        return out
    }

    /// The position of character `offset` inside a scalar (best effort: exact for one-line scalars).
    func loc(in node: YAMLNode, offset: Int) -> Loc {
        guard case .scalar(let s) = node else { return Loc(node) }
        if s.string.contains("\n") || s.style == .literal || s.style == .folded { return Loc(node) }
        let quote = (s.style == .singleQuoted || s.style == .doubleQuoted) ? 1 : 0
        return Loc(node).advanced(by: quote + offset)
    }
}
