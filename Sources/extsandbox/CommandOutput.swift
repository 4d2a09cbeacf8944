import Dispatch
import FoundationEssentials
import Glibc
import SandboxSystem
import Synchronization

// The CLI's output conventions, shared by every command: aligned tables, colour only on a
// terminal and never with NO_COLOR, `--json` for every listing, a progress line for slow work,
// and errors that say what to do.

/// Whether and how a stream is styled: colour only when it is a terminal, `NO_COLOR` is unset or
/// empty (https://no-color.org) and `TERM` is not "dumb".
struct OutputStyle: Sendable {
    /// Whether escape codes are written at all.
    let usesColor: Bool

    /// Styles for standard output and standard error, decided once from this process's state.
    static let standardOutput = OutputStyle(descriptor: 1)
    static let standardError = OutputStyle(descriptor: 2)

    init(usesColor: Bool) { self.usesColor = usesColor }

    init(descriptor: Int32) {
        usesColor = Self.wantsColor(
            isTerminal: isatty(descriptor) == 1, noColor: Self.variable("NO_COLOR"), term: Self.variable("TERM"))
    }

    /// The decision itself, apart from where its inputs come from.
    static func wantsColor(isTerminal: Bool, noColor: String?, term: String?) -> Bool {
        isTerminal && (noColor ?? "").isEmpty && term != "dumb"
    }

    private static func variable(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// The SGR codes the CLI uses.
    enum Color: String, Sendable {
        case bold = "1", dim = "2", red = "31", green = "32", yellow = "33"
    }

    /// `text` in `color` when colour is on, else `text` unchanged.
    func paint(_ text: String, _ color: Color?) -> String {
        guard usesColor, let color, !text.isEmpty else { return text }
        return "\u{1B}[\(color.rawValue)m\(text)\u{1B}[0m"
    }
}

/// A table whose columns line up: each column as wide as its widest cell plus two spaces, the last
/// not padded, an upper-case header, and optional indented note lines under a row. Cells and
/// notes are shown with their control characters escaped (``TerminalText``): they quote manifests
/// and declarations, whose text must not erase or fake a row. Colour is applied after padding,
/// so escape codes never disturb the alignment.
struct Table {
    struct Row {
        var cells: [String]
        var colors: [OutputStyle.Color?]
        var notes: [String]
    }

    let header: [String]
    private(set) var rows: [Row] = []

    init(_ header: [String]) { self.header = header }

    /// Adds a row; `colors` maps a column index to the colour of that cell.
    mutating func add(_ cells: [String], colors: [Int: OutputStyle.Color] = [:], notes: [String] = []) {
        precondition(cells.count == header.count, "a row has one cell per column")
        rows.append(Row(cells: cells.map { TerminalText.escaped($0) }, colors: header.indices.map { colors[$0] },
                        notes: notes.map { TerminalText.escaped($0) }))
    }

    /// The rendered lines, each ending in a newline.
    func render(_ style: OutputStyle = .standardOutput) -> String {
        let widths = header.indices.map { column in
            ([header] + rows.map(\.cells)).map { $0[column].count }.max() ?? 0
        }
        func line(_ cells: [String], _ colors: [OutputStyle.Color?]) -> String {
            var text = ""
            for (column, cell) in cells.enumerated() {
                let last = column == cells.count - 1
                text += style.paint(cell, colors[column])
                if !last { text += String(repeating: " ", count: widths[column] - cell.count + 2) }
            }
            return text
        }
        var output = line(header, header.map { _ in .bold }) + "\n"
        for row in rows {
            output += line(row.cells, row.colors) + "\n"
            for note in row.notes { output += "    " + note + "\n" }
        }
        return output
    }
}

/// `--json` output: one JSON document on standard output, keys sorted, slashes unescaped, so
/// that scripts can rely on the documented field names and diffs stay readable.
enum JSONOutput {
    static func print<Value: Encodable>(_ value: Value) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        Swift.print(String(decoding: try encoder.encode(value), as: UTF8.self))
    }
}

/// A progress line on standard error for work that may take longer than a second: drawn only
/// when standard error is a terminal, only once the work has run for a second (quick work shows
/// nothing), redrawn every 100 ms with the elapsed time, and erased when the work ends. Owned by
/// the thread doing the work; the line is drawn from a timer queue.
final class ProgressLine {
    /// What the timer draws, shared with it.
    private final class Line: Sendable {
        private struct State {
            var label: String
            var drawn = false
            var frame = 0
        }

        private let state: Mutex<State>
        private let start = DispatchTime.now()

        init(_ label: String) { state = Mutex(State(label: label)) }

        var wasDrawn: Bool { state.withLock { $0.drawn } }

        func update(_ label: String) { state.withLock { $0.label = label } }

        func draw() {
            let frames = ["|", "/", "-", "\\"]
            let seconds = (DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000_000
            let text = state.withLock { state -> String in
                state.drawn = true
                state.frame += 1
                return "\r\u{1B}[2K\(frames[state.frame % frames.count]) \(state.label) (\(seconds)s)"
            }
            ProgressLine.write(text)
        }
    }

    private let line: Line
    private let queue = DispatchQueue(label: "extsandbox.progress")
    private var timer: DispatchSourceTimer?

    /// How long work runs before the line appears: a second (EXTSANDBOX_PROGRESS_AFTER_MS
    /// overrides it, for tests that cannot make work slow on purpose).
    private static var delayMilliseconds: Int {
        getenv("EXTSANDBOX_PROGRESS_AFTER_MS").flatMap { Int(String(cString: $0)) } ?? 1000
    }

    init(_ label: String) {
        line = Line(label)
        guard isatty(2) == 1 else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .milliseconds(Self.delayMilliseconds), repeating: .milliseconds(100))
        timer.setEventHandler { [line] in line.draw() }
        timer.resume()
        self.timer = timer
    }

    deinit { finish() }

    /// Runs `work` with a progress line labelled `label`.
    static func during<Result>(_ label: String, _ work: (ProgressLine) throws -> Result) rethrows -> Result {
        let progress = ProgressLine(label)
        defer { progress.finish() }
        return try work(progress)
    }

    /// Changes what the line says (e.g. "checking standard.yaml (2 of 5)").
    func update(_ label: String) {
        line.update(label)
    }

    /// Stops and erases the line; waits for a redraw under way, so nothing is drawn after it.
    func finish() {
        guard let timer else { return }
        self.timer = nil
        timer.cancel()
        queue.sync {}
        if line.wasDrawn { Self.write("\r\u{1B}[2K") }
    }

    fileprivate static func write(_ text: String) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
