@testable import SandboxExec
import Foundation
import Glibc
@testable import extsandbox
import Testing
import TestSupport

/// `exec --json-status-fd N`: one line of JSON on descriptor N saying how the program ended.
@Suite("extsandbox exec --json-status-fd", .offThePool)
struct ExecStatusTests {
    /// Runs `exec --json-status-fd 3 OPTIONS -- ARGV` with descriptor 3 a file: the result and
    /// what the file holds.
    static func exec(_ argv: [String], options: [String] = []) async throws -> (Fixtures.Output, String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-status-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("status.json").path
        let words = ([TestPaths.cli, "exec", "--policy", Fixtures.policyPath(for: .root), "--json-status-fd", "3"] + options + ["--"] + argv)
            .map { "'\($0)'" }.joined(separator: " ")
        let result = try await Fixtures.run(["/bin/sh", "-c", "exec \(words) 3>'\(file)'"])
        return (result, try String(contentsOfFile: file, encoding: .utf8))
    }

    static func object(_ line: String) throws -> [String: Any] {
        #expect(line.hasSuffix("}\n") && line.filter { $0 == "\n" }.count == 1, "one line: \(line)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
    }

    /// The status line is written without Foundation (the `extsandbox` binary links none): it
    /// must read as JSONEncoder would write it, sorted keys and all.
    struct Mirror: Encodable {
        var end: String, status: Int32, pid: Int32?, pidInside: Int32?, exitCode: Int32?, signal: Int32?, violation: String?
    }

    @Test("the status line is what JSONEncoder writes, strings escaped", arguments: [
        ExecStatus(.exited(code: 3), pid: 10, pidInside: 3),
        ExecStatus(.signaled(signal: 15), pid: 11, pidInside: 2, status: 143),
        ExecStatus(.seccompViolation(syscall: "ptrace"), pid: 12, pidInside: 3),
        ExecStatus(.seccompViolation(syscall: "a\"b\\c/d\n\u{1}\u{7f}\u{e9}\u{1F600}\u{8}\u{c}\t\r\u{1b}\u{2028}\u{2029}"), pid: 13, pidInside: 3),
        ExecStatus(.memoryLimitExceeded, pid: 14, pidInside: 3), ExecStatus(notStartedWith: 125),
    ])
    func lineMatchesJSONEncoder(_ status: ExecStatus) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let mirror = Mirror(end: status.end, status: status.status, pid: status.pid, pidInside: status.pidInside,
                            exitCode: status.exitCode, signal: status.signal, violation: status.violation)
        let expected = String(decoding: try encoder.encode(mirror), as: UTF8.self) + "\n"
        #expect(status.line == expected)
        #expect(try Self.object(status.line)["end"] as? String == status.end)
    }

    @Test("an exit: end, status, exit code and both pids; the sandbox never sees the descriptor")
    func exited() async throws {
        let (result, line) = try await Self.exec(["/bin/sh", "-c", "echo x >&3 || exit 3"])
        #expect(result.status == 3, "\(result.stderr)")
        let status = try Self.object(line)
        #expect(status["end"] as? String == "exited" && status["status"] as? Int == 3 && status["exitCode"] as? Int == 3, "\(line)")
        #expect((status["pid"] as? Int ?? 0) > 1 && (status["pidInside"] as? Int ?? 0) >= 1, "\(line)")
        #expect(status["signal"] == nil && status["violation"] == nil, "\(line)")
    }

    @Test("a seccomp violation names the system call")
    func violation() async throws {
        let (result, line) = try await Self.exec([Fixtures.probe, "ptrace"])
        #expect(result.status == 159, "\(result.stderr)")
        let status = try Self.object(line)
        #expect(status["end"] as? String == "seccomp-violation" && status["signal"] as? Int == Int(SIGSYS), "\(line)")
        #expect(status["violation"] as? String == "ptrace" && status["status"] as? Int == 159, "\(line)")
    }

    @Test("nothing ran: not-started, with the status")
    func notStarted() async throws {
        let (result, line) = try await Self.exec(["/nonexistent/program"])
        #expect(result.status == 127)
        let status = try Self.object(line)
        #expect(status["end"] as? String == "not-started" && status["status"] as? Int == 127 && status["pid"] == nil, "\(line)")
    }

    @Test("a file that cannot be run: 126, as a shell says (not 125, the sandbox, nor 127, not found)")
    func notExecutable() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-126-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(at: directory) }
        let text = directory.path + "/notes.txt", garbage = directory.path + "/garbage"
        try Fixtures.writeFile(text, Array("notes\n".utf8), mode: 0o644)
        try Fixtures.writeFile(garbage, [0, 1, 2, 3], mode: 0o755)
        for (path, message) in [(text, "\(text): permission denied (not executable)"),
                                (garbage, "Exec format error"), ("/usr/bin", "/usr/bin: Permission denied")] {
            let (result, line) = try await Self.exec([path])
            #expect(result.status == 126, "\(path): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(result.stderr)")
            let status = try Self.object(line)
            #expect(status["end"] as? String == "not-started" && status["status"] as? Int == 126, "\(line)")
        }
        // A script whose interpreter is missing: not found, 127 (the sandbox was fine: not 125).
        let orphan = directory.path + "/orphan"
        try Fixtures.writeFile(orphan, Array("#!/nonexistent/interpreter\n".utf8), mode: 0o755)
        let (missing, line) = try await Self.exec([orphan])
        #expect(missing.status == 127, "\(missing.stderr)")
        #expect(try Self.object(line)["status"] as? Int == 127, "\(line)")
    }

    @Test("both parsers read the option; a descriptor that is not open is a usage error")
    func parsing() throws {
        let descriptor = dup(1)
        defer { close(descriptor) }
        let arguments = ["--json-status-fd", "\(descriptor)", "--", "/bin/true"]
        let quick = try #require(ExecRequest.quickParse(arguments[...]))
        let parsed = try #require(try ExtSandboxCommand.parseAsRoot(["exec"] + arguments) as? ExecCommand)
        #expect(quick.statusDescriptor == descriptor && quick == parsed.request)
        #expect {
            _ = try ExtSandboxCommand.parseAsRoot(["exec", "--json-status-fd", "1999", "--", "/bin/true"])
        } throws: { error in
            ExtSandboxCommand.message(for: error).contains("--json-status-fd expects an open file descriptor above 2")
        }
    }
}
