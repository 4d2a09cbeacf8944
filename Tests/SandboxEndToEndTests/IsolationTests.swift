import Foundation
import Testing
import TestSupport

/// The hostile probe tries every forbidden thing from inside the sandbox, once as root and
/// once as an unprivileged caller (through setpriv), and each attempt must be blocked.
@Suite("Escape attempts under the standard policy")
struct IsolationTests {
    struct Check: Sendable, CustomTestStringConvertible {
        let name: String
        /// kill, sigsys, blocked or ok (see `xsb-probe list`).
        let expectation: String
        let syscall: String?
        var testDescription: String { name }
    }

    /// Every check the probe knows, straight from `xsb-probe list`, so none is forgotten.
    static func checks() async -> [Check] {
        guard let output = try? await Fixtures.run([Fixtures.probe, "list"]) else { return [] }
        return output.stdout.split(separator: "\n").map { line in
            let words = line.split(separator: " ").map(String.init)
            return Check(name: words[0], expectation: words.count > 1 ? words[1] : "?", syscall: words.count > 2 ? words[2] : nil)
        }
    }

    @Test("the probe lists its checks")
    func probeListsChecks() async {
        let checks = await Self.checks()
        #expect(checks.count >= 40)
        #expect(checks.contains { $0.expectation == "kill" && $0.syscall == "ptrace" })
    }

    @Test("forbidden operation is blocked", arguments: await checks(), Fixtures.Caller.allCases)
    func blocked(check: Check, caller: Fixtures.Caller) async throws {
        var args = [Fixtures.probe, check.name]
        if check.name == "hostname" { args.append("extsandbox") }
        // The program itself is bound at its own path; nothing else of the host's may show.
        if check.name == "mounts" { args += ["/root", "/home", "/var", "/work/main/Sources", "/etc/shadow"] }
        let result = try await Fixtures.exec(args, as: caller)
        let context = Comment(rawValue: "\(check.name) as \(caller): status \(result.status)\nstdout: \(result.stdout)\nstderr: \(result.stderr)")
        switch check.expectation {
        case "kill":
            #expect(result.status == 128 + SIGSYS, context)
            #expect(result.stderr.contains("killed: seccomp violation: \(check.syscall ?? "?")"), context)
        case "sigsys":
            #expect(result.status == 128 + SIGSYS, context)
            #expect(result.stderr.contains("seccomp violation"), context)
        case "blocked":
            #expect(result.status == 0, context)
            #expect(result.stdout.contains("\(check.name): blocked"), context)
        case "ok":
            #expect(result.status == 0, context)
            #expect(result.stdout.contains("\(check.name): ok"), context)
        default:
            Issue.record("unknown expectation \(check.expectation) for \(check.name)")
        }
    }

    @Test("the violation report names the program and the syscall")
    func violationReport() async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "ptrace"])
        #expect(result.status == 159)
        #expect(result.stderr == "extsandbox: \(Fixtures.probe) killed: seccomp violation: ptrace\n")
    }

    @Test("a fork bomb stays inside", arguments: Fixtures.Caller.allCases)
    func forkBomb(caller: Fixtures.Caller) async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "fork-bomb", "100000"], as: caller)
        // Either fork fails (EAGAIN at the process limit) and the probe reports it, or the
        // limit kills it; it never gets anywhere near 100000.
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        let reached = result.stdout.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }.max() ?? 0
        #expect(reached < 1000, "\(result.stdout)")
    }

    @Test("a memory bomb stays inside", arguments: Fixtures.Caller.allCases)
    func memoryBomb(caller: Fixtures.Caller) async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "memory-bomb", "8192"], as: caller)
        // The standard policy allows 1 GiB: allocation fails (rlimit) or the cgroup kills it.
        let context = Comment(rawValue: "status \(result.status): \(result.stdout) \(result.stderr)")
        #expect(result.status == 0 || result.status == 137, context)
        if result.status == 0 { #expect(result.stdout.contains("memory-bomb"), context) }
    }
}
