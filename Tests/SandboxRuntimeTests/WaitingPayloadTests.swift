import CSandboxShim
import Foundation
import Glibc
import SandboxPolicy
@testable import SandboxRuntime
import SandboxSystem
import TestSupport
import Testing

/// A pre-built sandbox's payload that waits for its launch with its filter loaded
/// (`waiting_payload.c`), and the filters that do not let it wait.
@Suite("Waiting payloads of pre-built sandboxes", .offThePool)
struct WaitingPayloadTests {
    /// The processes whose parent is `pid` (its main thread's children).
    static func children(of pid: pid_t) -> [pid_t] {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        return text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// `field` of /proc/PID/status ("Seccomp", "NoNewPrivs", "CapEff"…).
    static func status(_ pid: pid_t, _ field: String) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return line.dropFirst(field.count + 1).trimmingCharacters(in: .whitespaces)
        }
        return nil
    }

    /// Its command line, arguments separated by spaces.
    static func commandLine(_ pid: pid_t) -> String? {
        (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))).map { String(decoding: $0.map { $0 == 0 ? 32 : $0 }, as: UTF8.self) }
    }

    /// A warm launch of `configuration` in the pre-built sandbox `supervisor` keeps for it, as
    /// that sandbox answers (``Supervisor/launch(_:)`` would go cold after a failure). Nil
    /// when none was kept.
    static func warmAttempt(_ supervisor: Supervisor, _ configuration: SandboxConfiguration) async throws -> Result<SandboxedProcess, SandboxError>? {
        let shape = try supervisor.shape(of: configuration)
        guard let ready = supervisor.pool.take(shape.key) else { return nil }
        let stdio = try Supervisor.checkedStandardStreams(configuration)
        do {
            guard let process = try await supervisor.launch(configuration, stdio: stdio, executable: shape.executable, in: ready) else { return nil }
            return .success(process)
        } catch {
            return .failure(error)
        }
    }

    /// The standard policy with `edit` applied.
    static func policy(_ edit: (inout Policy) -> Void = { _ in }) throws -> Policy {
        var policy = try Fixtures.standardPolicy()
        edit(&policy)
        return policy
    }

    @Test("an idle pre-built sandbox's payload already waits, filtered and without privileges, and the launch execs that very process")
    func waitsFilteredAndRuns() async throws {
        let supervisor = try SandboxPoolTests.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let input = OutputPipe()
        var configuration = try SandboxPoolTests.shell("read line; exit 4")
        configuration.standardInput = .fileDescriptor(borrowed(input.readFD))
        try await supervisor.prepare(configuration, count: 1)
        let initPID = try #require(SandboxPoolTests.readyPIDs(supervisor).first)
        let waiting = try #require(Self.children(of: initPID).first, "the idle init has a child: the waiting payload")
        #expect(Self.status(waiting, "Seccomp") == "2", "its filter is loaded")
        #expect(Self.status(waiting, "NoNewPrivs") == "1")
        #expect(Self.status(waiting, "CapEff") == "0000000000000000")
        #expect(Self.status(waiting, "CapBnd") == "0000000000000000")
        #expect(Self.commandLine(waiting)?.contains("read line") == false, "nothing of the program runs before the launch")

        let process = try await supervisor.launch(configuration)
        #expect(process.pid == initPID, "the launch took the pre-built sandbox")
        #expect(await Fixtures.eventually { Self.commandLine(waiting)?.contains("read line") == true }, "the waiting payload exec'd the program")
        _ = write(input.writeFD, "go\n", 3)
        input.closeWriteEnd()
        #expect(await process.waitForExit() == .exited(code: 4))
    }

    /// Read allowed only below the go-ahead fd's number: every program works, the waiting does not.
    static func readBelowTheGoAheadFD() throws -> Policy {
        try policy {
            $0.seccomp.rules.removeAll { $0.syscall == "read" }
            $0.seccomp.rules.append(SyscallRule(syscall: "read", action: .allow,
                                                conditions: [ArgumentCondition(index: 0, op: .less, value: UInt64(XSB_WAITING_PAYLOAD_GO_FD))]))
        }
    }

    @Test("the payload waits only under a filter that allows its read of the go-ahead fd, and its chdir unless it stays at /, whatever their pointers")
    func whichFiltersLetItWait() throws {
        func canWait(_ policy: Policy, in directory: String = "/tmp") throws -> Bool {
            LaunchPlan.payloadCanWait(under: try policy.compileSeccompFilter(), workingDirectory: directory)
        }
        let noChdir = try Self.policy { $0.seccomp.rules.removeAll { $0.syscall == "chdir" } }
        #expect(try canWait(Self.policy()))
        #expect(try canWait(Self.policy(), in: "/"))
        #expect(try !canWait(noChdir))
        #expect(try canWait(noChdir, in: "/"), "at / it makes no chdir")
        #expect(try !canWait(Self.policy { $0.seccomp.rules.removeAll { $0.syscall == "read" } }, in: "/"))
        #expect(try !canWait(Self.readBelowTheGoAheadFD(), in: "/"), "a read the filter allows for low fds only would stop it")
        let chdirBelowSomeAddress = try Self.policy {
            $0.seccomp.rules.removeAll { $0.syscall == "chdir" }
            $0.seccomp.rules.append(SyscallRule(syscall: "chdir", action: .allow, conditions: [ArgumentCondition(index: 0, op: .less, value: 0x1000_0000)]))
        }
        #expect(try !canWait(chdirBelowSomeAddress), "a rule on the pointer may stop it at some address")
        let writeStandardStreamsOnly = try Self.policy {
            $0.seccomp.rules.removeAll { $0.syscall == "write" }
            $0.seccomp.rules.append(SyscallRule(syscall: "write", action: .allow, conditions: [ArgumentCondition(index: 0, op: .lessOrEqual, value: 2)]))
        }
        #expect(try !canWait(writeStandardStreamsOnly, in: "/"), "its status record's write would be stopped")
    }

    @Test("under a filter that would stop the waiting, the sandbox is pre-built without it and its launch runs")
    func noWaitingUnderAStricterFilter() async throws {
        let supervisor = try SandboxPoolTests.supervisor()
        defer { Task { await supervisor.drainPool() } }
        var configuration = try SandboxPoolTests.shell("exit 5")
        configuration.policy = try Self.readBelowTheGoAheadFD()
        try await supervisor.prepare(configuration, count: 1)
        let initPID = try #require(SandboxPoolTests.readyPIDs(supervisor).first)
        #expect(Self.children(of: initPID).isEmpty, "nothing waits in it")
        let process = try await supervisor.launch(configuration)
        #expect(process.pid == initPID)
        #expect(await process.waitForExit() == .exited(code: 5))
    }

    @Test("under a filter without chdir the payload waits for launches at / only; one elsewhere takes a sandbox of its own shape")
    func noChdirWaitsAtTheRootOnly() async throws {
        let supervisor = try SandboxPoolTests.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let output = OutputPipe()
        var atRoot = try SandboxPoolTests.shell("pwd", stdout: output.writeFD)
        atRoot.policy = try Self.policy { $0.seccomp.rules.removeAll { $0.syscall == "chdir" } }
        var inTmp = atRoot
        inTmp.workingDirectory = "/tmp"
        try await supervisor.prepare(atRoot, count: 1)
        try await supervisor.prepare(inTmp, count: 1)
        let pids = SandboxPoolTests.readyPIDs(supervisor)
        #expect(pids.count == 2)
        #expect(pids.filter { !Self.children(of: $0).isEmpty }.count == 1, "one waits: the one for /")
        let first = try await supervisor.launch(atRoot)
        #expect(pids.contains(first.pid))
        #expect(await first.waitForExit() == .exited(code: 0))
        let second = try await supervisor.launch(inTmp)
        #expect(pids.contains(second.pid))
        #expect(await second.waitForExit() == .exited(code: 0))
        output.closeWriteEnd()
        #expect(await output.waitFor("/tmp\n") == "/\n/tmp\n")
    }

    @Test("a waiting payload's launch fails at the step a cold launch fails at")
    func failsLikeACold() async throws {
        let directory = try TestPaths.makePolicyDirectory("waiting-payload-failures").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let script = directory + "/no-interpreter"
        try "#!/nonexistent/interpreter\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        var noDirectory = try SandboxPoolTests.shell("exit 0")
        noDirectory.workingDirectory = "/nonexistent-directory"
        var noInterpreter = try SandboxPoolTests.shell("exit 0")
        noInterpreter.executable = script
        noInterpreter.arguments = ["no-interpreter"]

        for configuration in [noDirectory, noInterpreter] {
            let cold = try Supervisor(), warm = try SandboxPoolTests.supervisor()
            defer { Task { await warm.drainPool() } }
            var coldError: SandboxError?
            do { _ = try await cold.launch(configuration) } catch { coldError = error }
            try await warm.prepare(configuration, count: 1)
            let initPID = try #require(SandboxPoolTests.readyPIDs(warm).first)
            #expect(!Self.children(of: initPID).isEmpty, "its payload waits")
            let attempt = try #require(try await Self.warmAttempt(warm, configuration), "a pre-built sandbox was kept")
            let expected = try #require(coldError, "the cold launch fails")
            guard case .failure(let warmError) = attempt else {
                Issue.record("the warm launch ran")
                continue
            }
            #expect(warmError.step == expected.step, "warm: \(warmError), cold: \(expected)")
            #expect(warmError.errorNumber == expected.errorNumber)
            #expect(await Fixtures.eventually { Fixtures.processState(initPID) == nil }, "the failed sandbox is gone")
        }
    }

    @Test("a working directory only a capability could enter is refused, warm and cold: the payload changes directory with its own rights")
    func workingDirectoryWithTheProgramsRights() async throws {
        let identity = try HostIdentity.forCaller()
        let directory = try TestPaths.makePolicyDirectory("waiting-payload-closed-directory").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let closed = directory + "/closed"
        #expect(mkdir(closed, 0o000) == 0)
        #expect(chown(directory, identity.uid, identity.gid) == 0 || getuid() != 0)
        #expect(chown(closed, identity.uid, identity.gid) == 0 || getuid() != 0)
        chmod(closed, 0o000)
        var configuration = try SandboxPoolTests.shell("exit 0")
        configuration.policy.filesystem.mounts.append(.bind(source: closed, destination: "/closed", writable: false, optional: false))
        configuration.workingDirectory = "/closed"

        let cold = try Supervisor(), warm = try SandboxPoolTests.supervisor()
        defer { Task { await warm.drainPool() } }
        try await warm.prepare(configuration, count: 1)
        let prebuilt = try #require(SandboxPoolTests.readyPIDs(warm).first)
        #expect(!Self.children(of: prebuilt).isEmpty, "its payload waits")
        do {
            let process = try await cold.launch(configuration)
            Issue.record("launched cold in a directory its program may not enter: \(await process.waitForExit())")
        } catch {
            #expect(error.step == .workingDirectory && error.errorNumber == EACCES, "cold: \(error)")
        }
        switch try await Self.warmAttempt(warm, configuration) {
        case .failure(let error): #expect(error.step == .workingDirectory && error.errorNumber == EACCES, "warm: \(error)")
        case .success(let process): Issue.record("launched warm in a directory its program may not enter: \(await process.waitForExit())")
        case nil: Issue.record("no pre-built sandbox was kept")
        }
    }

    @Test("a waiting payload killed or stopped while its sandbox is idle ends that sandbox, which is replaced; the launch runs",
          arguments: [SIGKILL, SIGSTOP])
    func endedOrStoppedWhileWaiting(_ signal: Int32) async throws {
        let supervisor = try SandboxPoolTests.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let shape = try SandboxPoolTests.shell("exit 6")
        try await supervisor.prepare(shape, count: 1)
        let initPID = try #require(SandboxPoolTests.readyPIDs(supervisor).first)
        let waiting = try #require(Self.children(of: initPID).first)
        #expect(kill(waiting, signal) == 0)
        // A payload that can never exec: its sandbox must not wait for a launch it would hang.
        #expect(await Fixtures.eventually { Fixtures.processState(initPID) == nil && Fixtures.processState(waiting) == nil },
                "the sandbox ended")
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 1 && !SandboxPoolTests.readyPIDs(supervisor).contains(initPID) },
                "and was replaced")
        let process = try await supervisor.launch(shape)
        #expect(await process.waitForExit() == .exited(code: 6))
    }
}
