import SandboxSystem

/// What `extsandbox test` found.
struct ConformanceReport: Codable, Sendable {
    struct Check: Codable, Sendable {
        enum Status: String, Codable, Sendable { case pass, fail, skip }
        var name: String
        var status: Status
        /// What was seen.
        var detail: String
        /// For a failure: what to change.
        var fix: String?
        var milliseconds: Int
    }

    /// A row of what the sandbox blocks: `what` and `sandbox` for people, and the same as
    /// fields for programs (`--json`); a field that does not apply to the row is left out.
    struct Block: Codable, Sendable, Equatable {
        /// A syscall group (`@mount`), `exec after start`, `network`, `filesystem` or `limits`.
        var what: String
        /// The row as the table shows it.
        var sandbox: String
        /// A syscall group: how many of its calls this kernel has, and how many of them each
        /// action gets, named as in a policy file (`kill`, `allow`, `log`, `errno EPERM`), or
        /// `conditional` when it depends on the call's arguments.
        var syscalls: Int?
        var actions: [String: Int]?
        /// Exec after the start: whether `execve`/`execveat` are allowed once the program runs.
        var allowed: Bool?
        /// The network: `none` (loopback only, in its own network namespace).
        var network: String?
        /// The file system: the paths visible read-only and writable, and the tmpfs mounts.
        var readOnly: [String]?
        var writable: [String]?
        var tmpfs: [Tmpfs]?
        /// The limits that are set.
        var memoryBytes: UInt64?
        var processes: UInt64?
        var openFiles: UInt64?
        var cpuSeconds: UInt64?
        var wallClockSeconds: UInt64?

        struct Tmpfs: Codable, Sendable, Equatable {
            var destination: String
            var sizeBytes: UInt64
        }

        init(what: String, sandbox: String) {
            (self.what, self.sandbox) = (what, sandbox)
        }
    }

    var extensionIdentifier: String?
    var bundle: String?
    var policy: String?
    var policyOrigin: String?
    var passed: Bool { !checks.contains { $0.status == .fail } && typedCalls.result != .failed }
    var checks: [Check] = []
    /// The call envelope's probe (docs/wire-protocol.md §12.4), a block of its own.
    var typedCalls = TypedCallsReport()
    var blocks: [Block] = []

    enum CodingKeys: String, CodingKey {
        case extensionIdentifier = "extension", bundle, policy, policyOrigin = "policy-origin", checks, typedCalls = "typed-calls", blocks, passed
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(extensionIdentifier, forKey: .extensionIdentifier)
        try container.encodeIfPresent(bundle, forKey: .bundle)
        try container.encodeIfPresent(policy, forKey: .policy)
        try container.encodeIfPresent(policyOrigin, forKey: .policyOrigin)
        try container.encode(passed, forKey: .passed)
        try container.encode(checks, forKey: .checks)
        try container.encode(typedCalls, forKey: .typedCalls)
        try container.encode(blocks, forKey: .blocks)
    }

    init() {}

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        extensionIdentifier = try container.decodeIfPresent(String.self, forKey: .extensionIdentifier)
        bundle = try container.decodeIfPresent(String.self, forKey: .bundle)
        policy = try container.decodeIfPresent(String.self, forKey: .policy)
        policyOrigin = try container.decodeIfPresent(String.self, forKey: .policyOrigin)
        checks = try container.decode([Check].self, forKey: .checks)
        typedCalls = try container.decodeIfPresent(TypedCallsReport.self, forKey: .typedCalls) ?? TypedCallsReport()
        blocks = try container.decode([Block].self, forKey: .blocks)
    }

    /// The check for people: what was seen and what to change each on one line, escaped
    /// (``TerminalText``): they quote the manifest, errors and what the extension said.
    static func line(_ check: Check) -> String {
        let label = switch check.status { case .pass: "PASS"; case .fail: "FAIL"; case .skip: "SKIP" }
        var text = "  \(label)  \(check.name.padded(to: 28))\(TerminalText.escaped(check.detail))"
        if let fix = check.fix { text += "\n        fix: \(TerminalText.escaped(fix))" }
        return text
    }

    func blocksTable() -> String {
        guard !blocks.isEmpty else { return "" }
        let width = (blocks.map(\.what.count).max() ?? 0) + 2
        var lines = ["What the sandbox blocks (policy '\(TerminalText.escaped(policy ?? "?"))'):"]
        for block in blocks { lines.append("  \(block.what.padded(to: width))\(block.sandbox)") }
        return lines.joined(separator: "\n")
    }

    var summary: String {
        let passedCount = checks.filter { $0.status == .pass }.count
        let failedCount = checks.filter { $0.status == .fail }.count
        let skipped = checks.filter { $0.status == .skip }.count
        let counts = "\(passedCount) of \(checks.count) checks passed" + (failedCount > 0 ? ", \(failedCount) failed" : "")
            + (skipped > 0 ? ", \(skipped) not run" : "")
        return "conformance of \(TerminalText.escaped(extensionIdentifier ?? "the extension")): \(passed ? "PASSED" : "FAILED") (\(counts)); \(typedCalls.summary)"
    }
}

extension String {
    func padded(to width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
