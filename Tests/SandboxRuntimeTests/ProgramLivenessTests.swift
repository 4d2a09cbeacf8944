import Glibc
@testable import SandboxRuntime
import Testing

/// How /proc's view of a task is read (ProgramLiveness.swift); the whole path, a sandbox whose
/// program is killed while its init cannot report it, is LifecycleFaultTests' late-end test.
@Suite("Program liveness from /proc")
struct ProgramLivenessTests {
    @Test("a stat line's state and flags are read after the last parenthesis of the command name")
    func statFieldsAfterTheCommandName() throws {
        let line = "4242 (a) (b) Z 9 ) S 1 4242 4242 0 -1 4194564 120 0 0 0"
        let parsed = try #require(SandboxedProcess.parseStat(Array(line.utf8)))
        #expect(parsed.state == UInt8(ascii: "S") && parsed.flags == 4_194_564)
        #expect(SandboxedProcess.parseStat(Array("4242 (truncated".utf8)) == nil)
        #expect(SandboxedProcess.parseStat(Array("4242 (x) R 1 2".utf8)) == nil)
    }

    @Test("this process is alive, an unused pid is gone, a zombie is exiting")
    func statesOfRealTasks() throws {
        #expect(SandboxedProcess.taskState(getpid()) == .alive)
        #expect(SandboxedProcess.taskState(pid_t(Int32.max)) == .gone)
        // A child that has exited and is not reaped yet.
        var child: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { argv.forEach { free($0) } }
        #expect(posix_spawn(&child, "/bin/true", nil, nil, argv, environ) == 0)
        var info = siginfo_t()
        #expect(waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT) == 0)
        #expect(SandboxedProcess.taskState(child) == .exiting)
        var status: Int32 = 0
        #expect(waitpid(child, &status, 0) == child)
        #expect(SandboxedProcess.taskState(child) == .gone)
    }

    @Test("a process whose main thread called pthread_exit while another thread runs is alive, not exiting")
    func mainThreadGoneOthersRunning() async throws {
        // The main thread exits (a zombie flagged PF_EXITING); the other sleeps on for 20 s.
        let script = "import threading, time, ctypes\n"
            + "threading.Thread(target=time.sleep, args=(20,)).start()\n"
            + "ctypes.CDLL(None).pthread_exit(None)\n"
        var child: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("python3"), strdup("-c"), strdup(script), nil]
        defer { argv.forEach { free($0) } }
        #expect(posix_spawn(&child, "/usr/bin/python3", nil, nil, argv, environ) == 0)
        defer {
            kill(child, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(child, &status, 0)
        }
        // Until the main thread is gone, the process is alive anyway: wait for the state that matters.
        var leaderExited = false
        // Up to 15 s for Python to start (slow beside a build); its other thread sleeps 20 s.
        for _ in 0..<600 where !leaderExited {
            leaderExited = SandboxedProcess.threadState("/proc/\(child)/stat") == .exiting
            if !leaderExited { try await Task.sleep(for: .milliseconds(25)) }
        }
        #expect(leaderExited, "the main thread did not exit")
        #expect(SandboxedProcess.taskState(child) == .alive)
    }
}
