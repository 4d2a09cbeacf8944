
/// A position in a policy file. `file` is set once a position leaves the file's own parser
/// (list entries, rules, mounts), so that problems found after merging several files
/// (`extends:`, `include:`) still point into the right one.
struct Loc: Sendable, Equatable {
    var line: Int
    var column: Int
    var file: String?
    static let none = Loc(line: 0, column: 0)

    init(line: Int, column: Int, file: String? = nil) {
        self.line = line
        self.column = column
        self.file = file
    }

    init(_ mark: YAMLMark?) {
        self.init(line: mark?.line ?? 0, column: mark?.column ?? 0)
    }

    init(_ node: YAMLNode) { self.init(node.mark) }

    func advanced(by columns: Int) -> Loc { Loc(line: line, column: column + columns, file: file) }

    /// The same position, marked as being in `file` (unless it already names a file).
    func `in`(_ file: String) -> Loc { Loc(line: line, column: column, file: self.file ?? file) }

    /// "line 4" when `other` is in the same file, "base.yaml:4" otherwise.
    func place(seenFrom other: Loc) -> String {
        if let file, let otherFile = other.file, file != otherFile { return "\(file):\(line)" }
        return "line \(line)"
    }
}

/// Collects the problems of every file taking part in one load.
final class DiagnosticSink {
    private(set) var errors: [PolicyError] = []
    /// Files in the order they were first seen, for sorting (the top file first).
    private var fileOrder: [String: Int] = [:]

    func register(_ file: String) {
        if fileOrder[file] == nil { fileOrder[file] = fileOrder.count }
    }

    func append(_ error: PolicyError) {
        register(error.file)
        errors.append(error)
    }

    /// Errors sorted by file (in the order files were read), then position (stable for equal positions).
    var sorted: [PolicyError] {
        errors.enumerated().sorted { a, b in
            let fa = fileOrder[a.element.file] ?? Int.max, fb = fileOrder[b.element.file] ?? Int.max
            return (fa, a.element.line, a.element.column, a.offset) < (fb, b.element.line, b.element.column, b.offset)
        }.map(\.element)
    }
}

/// Reports the problems of one file (positions without a file are in this one) into a shared sink.
final class Diagnostics {
    let file: String
    let sink: DiagnosticSink
    /// Keys suggested for unknown keys ("did you mean"), so a missing-key error does not repeat them.
    var suggestedKeys: Set<String> = []

    init(file: String, sink: DiagnosticSink = DiagnosticSink()) {
        self.file = file
        self.sink = sink
        sink.register(file)
    }

    var errors: [PolicyError] { sink.errors }

    func error(_ loc: Loc, _ message: String) {
        sink.append(PolicyError(file: loc.file ?? file, line: loc.line, column: loc.column, message: message))
    }

    func error(_ node: YAMLNode, _ message: String) { error(Loc(node), message) }

    /// Problems of every file, sorted.
    var sorted: [PolicyError] { sink.sorted }
}

// MARK: - Reading YAML nodes as strings

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
                if let match = Suggest.closest(to: key, in: allowed) { diag.suggestedKeys.insert(match) }
                diag.error(loc, "unknown key \"\(key)\" in \(what)\(Suggest.hint(for: key, in: allowed))"
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

// MARK: - Values

enum Values {
    static let binaryUnits: [Character: UInt64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]

    /// `64K`, `256M`, `1G`, `2T` (binary units) or plain bytes.
    static func size(_ text: String) -> UInt64? {
        var digits = Substring(text)
        var unit: UInt64 = 1
        if let last = text.last, let m = binaryUnits[Character(last.uppercased())] {
            unit = m
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCIIDigit), let n = UInt64(digits) else { return nil }
        let (product, overflow) = n.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }

    /// A plain decimal count.
    static func count(_ text: String) -> UInt64? {
        guard !text.isEmpty, text.allSatisfy(\.isASCIIDigit) else { return nil }
        return UInt64(text)
    }

    /// Seconds: `600`, `600s`, `10m`, `2h`.
    static func seconds(_ text: String) -> UInt64? {
        let units: [Character: UInt64] = ["s": 1, "m": 60, "h": 3600]
        var digits = Substring(text)
        var unit: UInt64 = 1
        if let last = text.last, let m = units[last] {
            unit = m
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCIIDigit), let n = UInt64(digits) else { return nil }
        let (product, overflow) = n.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }

    static func isUnlimited(_ text: String) -> Bool { text == "none" || text == "unlimited" }

    /// An environment variable name.
    static func isVariableName(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic)
        else { return false }
        return text.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) }
    }
}

extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
