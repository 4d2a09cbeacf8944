import YAMLSupport

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
    /// "Did you mean" hints this load may still give. Each costs an edit distance against every
    /// candidate, so a file full of unknown names (fuzzing: 6 KiB of them took 10 s to check) gets
    /// hints for its first ones only; every problem is still reported.
    var hintsLeft = 20
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

    /// The closest candidate to an unknown `word` (``Suggest/closest(to:in:)``), while this load
    /// has hints left.
    func closest<S: Sequence>(to word: String, in candidates: S) -> String? where S.Element == String {
        guard sink.hintsLeft > 0 else { return nil }
        sink.hintsLeft -= 1
        return Suggest.closest(to: word, in: candidates)
    }

    /// `; did you mean "x"?`, or the empty string (no close candidate, or no hints left).
    func hint<S: Sequence>(for word: String, in candidates: S) -> String where S.Element == String {
        closest(to: word, in: candidates).map(Suggest.hint(match:)) ?? ""
    }

    /// Problems of every file, sorted.
    var sorted: [PolicyError] { sink.sorted }
}
