import SandboxSystem

/// Why a bundle, a declaration file or the approvals file cannot be used: the file, the line
/// (0 when the problem is the file as a whole) and the reason.
public struct CatalogProblem: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of problem: a broken file, an inconsistent bundle, or an unsafe one.
    public enum Kind: String, Sendable, Hashable {
        /// Not readable, not valid YAML, a missing or mistyped field.
        case broken
        /// Well-formed but wrong: a point the host does not define, an executable outside the
        /// bundle, a symbolic link out of it, a duplicate identifier.
        case inconsistent
        /// Writable by someone other than its owner and root: it could change between the
        /// check and the launch.
        case unsafe
        /// Not there (any more): the bundle directory does not exist, e.g. it was removed after
        /// discovery found it.
        case notInstalled
    }

    public var kind: Kind
    public var file: String
    public var line: Int
    public var reason: String

    public init(_ kind: Kind, file: String, line: Int = 0, _ reason: String) {
        self.kind = kind
        self.file = file
        self.line = line
        self.reason = reason
    }

    /// `FILE:LINE: reason` (or `FILE: reason`), as compilers print it, on one line with control
    /// characters escaped (`\e`, `\n`, `\x7f`…): the path and the reason quote what others wrote.
    public var description: String {
        TerminalText.escaped(line > 0 ? "\(file):\(line): \(reason)" : "\(file): \(reason)")
    }
}
