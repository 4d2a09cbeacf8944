import CSandboxShim
import Glibc
@testable import SandboxRuntime
import SandboxSystem
import Testing

/// SandboxSignals.swift, the supervisor's side of a sandbox's signals, on a plain child standing
/// for a sandbox's init (the whole path is LifecycleTests'): the kill of last resort reaches
/// the init only while its control socket is up, each request names its control message, and
/// each acknowledgement answers its own request (a relayed signal's too).
@Suite("SandboxSignals: the supervisor's side")
struct SandboxSignalsTests {
    /// A child that sleeps until it is killed.
    static func sleeper() throws -> pid_t {
        var child: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("60"), nil]
        defer { argv.forEach { free($0) } }
        try #require(posix_spawn(&child, "/bin/sleep", nil, nil, argv, environ) == 0)
        return child
    }

    /// Both ends of a socket pair standing for a control socket: the supervisor's and the init's.
    static func controlPair() throws -> (supervisor: FileDescriptor, initEnd: FileDescriptor) {
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        return (try #require(FileDescriptor(adopting: pair[0])), try #require(FileDescriptor(adopting: pair[1])))
    }

    /// The signal that ended the child `pid` (reaping it), or nil.
    static func endedBy(_ pid: pid_t) -> Int32? {
        var status: Int32 = 0
        guard retryingInterrupts({ waitpid(pid, &status, 0) }) == pid, status & 0x7f != 0 else { return nil }
        return status & 0x7f
    }

    @Test("the kill of last resort reaches the init while its control socket is up, never once it hung up or the init is reaped")
    func killInitOnlyWhileTheControlSocketIsUp() throws {
        let child = try Self.sleeper()
        let hungUp = try Self.controlPair()
        hungUp.initEnd.close()
        #expect(!SandboxSignals.killInit(pid: child, controlFD: hungUp.supervisor))
        #expect(!SandboxSignals.killInit(pid: child, controlFD: nil))
        #expect(kill(child, 0) == 0, "still running")
        hungUp.supervisor.close()

        let up = try Self.controlPair()
        defer { up.supervisor.close(); up.initEnd.close() }
        #expect(SandboxSignals.killInit(pid: child, controlFD: up.supervisor))
        #expect(Self.endedBy(child) == SIGKILL)
        // Reaped: its pid may be another process's now; no pidfd opens, nothing is sent.
        #expect(!SandboxSignals.killInit(pid: child, controlFD: up.supervisor))
    }

    @Test("the launch's pidfd and an unreaped child's pid are killed")
    func killByPidfdAndByPid() throws {
        let first = try Self.sleeper()
        let pidfd = try #require(InitProcess.openPidfd(first))
        #expect(SandboxSignals.kill(pidfd: pidfd.rawValue))
        #expect(Self.endedBy(first) == SIGKILL)
        #expect(!SandboxSignals.kill(pidfd: pidfd.rawValue), "its process is reaped")
        pidfd.close()

        let second = try Self.sleeper()
        SandboxSignals.kill(unreapedChild: second)
        #expect(Self.endedBy(second) == SIGKILL)
    }

    @Test("a relayed signal's acknowledgement never answers a waiting request: the waiter gets its own")
    func relayedSignalKeepsItsPlaceAmongAcknowledgements() async throws {
        let child = try Self.sleeper()
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        let initEnd = pair[1]
        var result = xsb_spawn_result()
        result.pid = child
        result.pidfd = -1
        result.control_fd = pair[0]  // the process owns it from here
        result.early_violation = Int32(XSB_NO_VIOLATION)
        result.failed_step = Int32(XSB_STEP_NONE.rawValue)
        let process = SandboxedProcess(result: result, monitor: Supervisor.shared.monitor, cgroup: nil)
        try process.startMonitoring()
        defer {
            kill(child, SIGKILL)
            close(initEnd)
        }

        process.signalWithoutWaiting(SIGWINCH)
        let waiter = Task { try await process.signal(SIGTERM) }
        // Both requests are on the socket before either is answered, the relayed one first.
        var request = xsb_msg()
        for expected in [SIGWINCH, SIGTERM] {
            #expect(recv(initEnd, &request, MemoryLayout<xsb_msg>.size, 0) == MemoryLayout<xsb_msg>.size)
            #expect(request.type == UInt32(XSB_MSG_SIGNAL.rawValue) && request.value == expected)
        }
        for answer in [0, EPERM] {
            var ack = xsb_msg()
            ack.type = UInt32(XSB_MSG_ACK.rawValue)
            ack.value = Int32(XSB_MSG_SIGNAL.rawValue)
            ack.value2 = answer
            #expect(send(initEnd, &ack, MemoryLayout<xsb_msg>.size, 0) == MemoryLayout<xsb_msg>.size)
        }
        await #expect {
            try await waiter.value
        } throws: { error in
            (error as? SandboxError)?.errorNumber == EPERM
        }
    }

    @Test("each request names its control message, a signal carries its number")
    func requests() {
        #expect(SandboxSignals.Request.suspend.messageType == UInt32(XSB_MSG_SUSPEND.rawValue))
        #expect(SandboxSignals.Request.resume.messageType == UInt32(XSB_MSG_RESUME.rawValue))
        #expect(SandboxSignals.Request.signal(SIGTERM).messageType == UInt32(XSB_MSG_SIGNAL.rawValue))
        #expect(SandboxSignals.Request.signal(SIGTERM).value == SIGTERM && SandboxSignals.Request.suspend.value == 0)
        #expect(SandboxSignals.forwardedToProgram == [SIGINT, SIGTERM, SIGHUP, SIGQUIT])
    }
}
