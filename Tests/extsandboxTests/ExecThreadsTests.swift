import Foundation
import Glibc
import SandboxExec
import SandboxRuntime
import Testing
import TestSupport

/// A one-shot `extsandbox exec` runs on its main thread, with the supervisor's own threads only:
/// no Dispatch or Swift concurrency thread is started to run it, wait for its sandbox or forward
/// the caller's signals (each would be one more thread to wake per run), and the signals still
/// reach the program.
@Suite("extsandbox exec: threads and forwarded signals", .offThePool)
struct ExecThreadsTests {
    /// The names of the CLI's threads (`/proc/PID/task/*/comm`).
    static func threadNames(of pid: pid_t) -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { task in
            (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }.sorted()
    }

    /// Whether process `pid` has a handler of its own for `number` (`SigCgt` in its status).
    static func catches(_ pid: pid_t, _ number: Int32) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
              let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { return false }
        return mask & (1 << UInt64(number - 1)) != 0
    }

    /// Runs `extsandbox exec ARGUMENTS -- /bin/sleep 60`, sends it `number` once its handler is
    /// in place, and checks what a one-shot run must be: no Dispatch thread while the program
    /// runs, and the signal forwarded to the program (whose status the CLI exits with).
    static func expectMainThreadRunForwarding(_ number: Int32, arguments: [String]) async throws {
        let started = try Fixtures.start([TestPaths.cli, "exec"] + arguments + ["--", "/bin/sleep", "60"])
        let cli = started.process.processIdentifier
        // Forwarding: the CLI has its handler in place (until then the signal would be the CLI's own,
        // with the disposition it inherited).
        let running = await Fixtures.eventually { Self.catches(cli, number) }
        let names = Self.threadNames(of: cli)
        kill(cli, number)
        let output = await started.output()
        #expect(running, "no handler for signal \(number): \(output.stderr)")
        // Dispatch names its threads com.apple.root.* (workers) and com.apple.libdispatch-manager.
        #expect(!names.isEmpty && !names.contains { $0.hasPrefix("com.apple") || $0.contains("qos") }, "\(names)")
        #expect(output.status == 128 + number, "signal \(number): \(output.stderr)")
    }

    /// SIGQUIT is forwarded too, but Swift's runtime catches it from the start (for backtraces), so
    /// `SigCgt` cannot tell when the CLI's forwarding is in place.
    @Test("while the program runs the CLI has no Dispatch thread, and each forwarded signal reaches the program",
          arguments: SandboxSignals.forwardedToProgram.filter { $0 != SIGQUIT })
    func noDispatchThreadsAndSignalsForwarded(_ number: Int32) async throws {
        try await Self.expectMainThreadRunForwarding(number, arguments: ["--policy", Fixtures.policyPath(for: .root)])
    }

    /// `--policy` given twice is a shape the quick parser leaves to ArgumentParser (in
    /// extsandbox-commands, which `extsandbox` execs for it): it runs on the main thread all the same.
    @Test("an exec that ArgumentParser parses runs on the main thread too: no Dispatch thread while the program runs")
    func parsedByArgumentParserRunsOnTheMainThread() async throws {
        let policy = Fixtures.policyPath(for: .root)
        #expect(ExecRequest.quickParse(["--policy", policy, "--policy", policy, "--", "/bin/true"]) == nil)
        try await Self.expectMainThreadRunForwarding(SIGTERM, arguments: ["--policy", policy, "--policy", policy])
    }
}
