import Foundation
import TestSupport
import Testing

/// The shipped levels, enforced by the real runtime (the policy module tests them as filters).
@Suite("Shipped policy levels in real sandboxes")
struct PolicyLevelTests {
    static func exec(_ level: String, _ argv: [String], options: [String] = [], as caller: Fixtures.Caller = .root) async throws -> Fixtures.Output {
        try await Fixtures.run([Fixtures.cli, "exec", "--policy", Fixtures.policyPath(level, for: caller)] + options + ["--"] + argv, as: caller)
    }

    @Test("restricted: the launch's own exec runs, any later exec kills the sandbox", arguments: Fixtures.Caller.allCases)
    func restrictedExecOnce(caller: Fixtures.Caller) async throws {
        let builtins = try await Self.exec("restricted", ["/bin/sh", "-c", "echo computed $((6 * 7))"], as: caller)
        #expect(builtins.status == 0, "\(builtins.stderr)")
        #expect(builtins.stdout == "computed 42\n")

        let exec = try await Self.exec("restricted", ["/bin/sh", "-c", "echo before; /bin/true; echo after"], as: caller)
        #expect(exec.status == 159)
        #expect(exec.stdout == "before\n")
        #expect(exec.stderr.contains("killed: seccomp violation: execve"), "\(exec.stderr)")
    }

    @Test("restricted: no sockets, but the sandbox otherwise works")
    func restrictedNoSockets() async throws {
        let socket = try await Self.exec("restricted", [Fixtures.probe, "net-connect"])
        #expect(socket.status == 0)
        #expect(socket.stdout.contains("blocked (EPERM)"), "\(socket.stdout)")
        let caps = try await Self.exec("restricted", [Fixtures.probe, "caps"])
        #expect(caps.status == 0, "\(caps.stdout)")
    }

    @Test("hardened: a process that opens a socket is killed", arguments: Fixtures.Caller.allCases)
    func hardenedKillsSocket(caller: Fixtures.Caller) async throws {
        let result = try await Self.exec("hardened", [Fixtures.probe, "net-connect"], as: caller)
        #expect(result.status == 159)
        #expect(result.stderr.contains("seccomp violation: socket"), "\(result.stderr)")
        let exit = try await Self.exec("hardened", [Fixtures.probe, "exit", "5"], as: caller)
        #expect(exit.status == 5, "\(exit.stderr)")
    }

    @Test("hardened: no page is writable and executable, at once or in turn", arguments: Fixtures.Caller.allCases)
    func hardenedWriteXorExecute(caller: Fixtures.Caller) async throws {
        // A private mapping of a read-only file (the probe's own executable): writable and
        // executable at once (mmap), or written and then made executable (mprotect).
        for check in ["wx-mmap", "wx-mprotect"] {
            let result = try await Self.exec("hardened", [Fixtures.probe, check], as: caller)
            #expect(result.status == 0, "\(check): \(result.stdout)\(result.stderr)")
            #expect(result.stdout.contains("\(check): blocked (EACCES)"), "\(result.stdout)\(result.stderr)")
        }
    }

    @Test("memory-deny-write-execute is set before the filter and survives the program's execve")
    func memoryDenyWriteExecuteSurvivesExec() async throws {
        // As root only: the policy file lives in a directory only its owner may read (the hardened
        // test above runs as both callers).
        let caller = Fixtures.Caller.root
        let dir = try TestPaths.makePolicyDirectory("mdwe").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "version: 1\nextends: \(Fixtures.standardPolicyPath)\nseccomp:\n  memory-deny-write-execute: true\n"
            .write(toFile: dir + "/mdwe.yaml", atomically: true, encoding: .utf8)
        func run(_ argv: [String], policy: String) async throws -> Fixtures.Output {
            try await Fixtures.run([Fixtures.cli, "exec", "--policy", policy, "--"] + argv, as: caller)
        }
        // Asked from inside, after the launch's execve: PR_MDWE_REFUSE_EXEC_GAIN (1).
        let flags = try await run([Fixtures.probe, "mdwe"], policy: dir + "/mdwe.yaml")
        #expect(flags.status == 0, "\(flags.stdout)\(flags.stderr)")
        #expect(flags.stdout == "mdwe: ok PR_GET_MDWE=1\n", "\(flags.stdout)\(flags.stderr)")
        let refused = try await run([Fixtures.probe, "wx-mmap"], policy: dir + "/mdwe.yaml")
        #expect(refused.stdout.contains("wx-mmap: blocked (EACCES)"), "\(refused.stdout)\(refused.stderr)")
        // Without it the same mapping works (and the code written into it runs): the check is real.
        let plain = try await run([Fixtures.probe, "mdwe"], policy: Fixtures.standardPolicyPath)
        #expect(plain.stdout == "mdwe: ok PR_GET_MDWE=0\n", "\(plain.stdout)\(plain.stderr)")
        let allowed = try await run([Fixtures.probe, "wx-mmap"], policy: Fixtures.standardPolicyPath)
        #expect(allowed.status == 1 && allowed.stdout.contains("wx-mmap: ESCAPED"), "\(allowed.stdout)\(allowed.stderr)")
    }

    @Test("audit mode under restricted lets a later exec run and reports it")
    func auditRestricted() async throws {
        let result = try await Self.exec("restricted", ["/bin/sh", "-c", "/bin/echo via-exec"], options: ["--audit"])
        #expect(result.status == 0)
        #expect(result.stdout == "via-exec\n")
        #expect(result.stderr.contains("would have denied: execve"), "\(result.stderr)")
    }
}

@Suite("Masked paths")
struct MaskTests {
    @Test("a masked directory is empty and read-only, a masked file cannot be opened")
    func masks() async throws {
        let dir = try TestPaths.makePolicyDirectory("mask").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "version: 1\nextends: \(Fixtures.standardPolicyPath)\nfilesystem:\n  mask: [/usr/share/doc, /usr/bin/sort, /usr/no-such-path]\n"
            .write(toFile: dir + "/masked.yaml", atomically: true, encoding: .utf8)
        let script = """
            [ -z "$(ls -A /usr/share/doc)" ] && echo doc-empty
            touch /usr/share/doc/x 2>/dev/null || echo doc-read-only
            cat /usr/bin/sort >/dev/null 2>&1 || echo sort-hidden
            [ -d /usr/share/man ] && echo rest-visible
            """
        let result = try await Fixtures.run([Fixtures.cli, "exec", "--policy", dir + "/masked.yaml", "--", "/bin/sh", "-c", script])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "doc-empty\ndoc-read-only\nsort-hidden\nrest-visible\n", "\(result.stdout)")
    }
}

@Suite("Limits from policies")
struct LimitTests {
    @Test("the wall-clock limit ends the sandbox and says so")
    func wallClock() async throws {
        let dir = try TestPaths.makePolicyDirectory("wall").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "version: 1\nextends: \(Fixtures.standardPolicyPath)\nlimits:\n  wall-clock: 1\n"
            .write(toFile: dir + "/short.yaml", atomically: true, encoding: .utf8)
        let started = Date()
        let result = try await Fixtures.run([Fixtures.cli, "exec", "--policy", dir + "/short.yaml", "--", Fixtures.probe, "sleep", "30"])
        #expect(result.status == 137)
        #expect(result.stderr.contains("wall-clock limit exceeded"), "\(result.stderr)")
        // Well before the program's own 30 s: the limit ended it (a generous bound, for loaded machines).
        #expect(Date().timeIntervalSince(started) < 20)
    }

    @Test("the CPU-time limit stops a spinning program")
    func cpuSeconds() async throws {
        let dir = try TestPaths.makePolicyDirectory("cpu").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "version: 1\nextends: \(Fixtures.standardPolicyPath)\nlimits:\n  cpu-seconds: 1\n"
            .write(toFile: dir + "/cpu.yaml", atomically: true, encoding: .utf8)
        let result = try await Fixtures.run([Fixtures.cli, "exec", "--policy", dir + "/cpu.yaml", "--", Fixtures.probe, "cpu-spin", "30"])
        // RLIMIT_CPU: SIGXCPU at the soft limit (the probe does not catch it).
        #expect(result.status == 128 + SIGXCPU || result.status == 128 + SIGKILL, "\(result.status) \(result.stderr)")
    }
}
