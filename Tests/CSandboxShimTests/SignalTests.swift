import CMechanismSupport
import Glibc
import Testing

/// signals.c: what the init and the payload inherit (ignored signals, handlers, a mask) reset,
/// and the supervisor's mask across its clone. The child starts ignoring SIGPIPE, SIGTERM and
/// glibc's own 32 and 33, catching SIGUSR1 and blocking SIGINT and SIGUSR2.
@Suite("Signals: dispositions and the mask reset")
struct SignalTests {
    static func bits(_ signals: [Int32]) -> Int64 { signals.reduce(0) { $0 | Int64(1) << Int64($1 - 1) } }

    /// Every signal the kernel lets a mask hold, but glibc's own two (32 and 33), which its
    /// sigprocmask never blocks.
    static let everyBlockable: Int64 = {
        var mask = Int64(bitPattern: UInt64.max)
        for signal in [SIGKILL, SIGSTOP, 32, 33] { mask &= ~bits([signal]) }
        return mask
    }()

    struct Case: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let step: xsbt_signal_step
        let ignored: Int64, caught: Int64, blocked: Int64
    }

    @Test("dispositions and mask after", arguments: [
        Case(testDescription: "nothing (the inherited state)", step: XSBT_NOTHING,
             ignored: bits([SIGPIPE, SIGTERM, 32, 33]), caught: bits([SIGUSR1]), blocked: bits([SIGINT, SIGUSR2])),
        Case(testDescription: "the init's reset: defaults, everything blocked", step: XSBT_INIT_RESET,
             ignored: 0, caught: 0, blocked: everyBlockable),
        Case(testDescription: "the payload's reset: defaults, the mask kept", step: XSBT_PAYLOAD_RESET,
             ignored: 0, caught: 0, blocked: bits([SIGINT, SIGUSR2])),
        Case(testDescription: "the payload's reset and unblock: defaults, nothing blocked", step: XSBT_PAYLOAD_RESET_UNBLOCK,
             ignored: 0, caught: 0, blocked: 0),
        Case(testDescription: "the supervisor's block across its clone: everything blocked, dispositions kept", step: XSBT_SUPERVISOR_BLOCK,
             ignored: bits([SIGPIPE, SIGTERM, 32, 33]), caught: bits([SIGUSR1]), blocked: everyBlockable),
        Case(testDescription: "the supervisor's block, then its restore: the mask it had", step: XSBT_SUPERVISOR_BLOCK_RESTORE,
             ignored: bits([SIGPIPE, SIGTERM, 32, 33]), caught: bits([SIGUSR1]), blocked: bits([SIGINT, SIGUSR2])),
    ])
    func reset(_ signalCase: Case) throws {
        let out = try outcome { xsbt_signals(signalCase.step, $0) }
        try #require(out.ranThrough, "\(out.failure)")
        let numbers = out.numbers
        func hex(_ value: Int64) -> String { String(UInt64(bitPattern: value), radix: 16) }
        #expect(hex(numbers[Int(XSBT_SIG_IGN)]) == hex(signalCase.ignored), "SigIgn")
        #expect(hex(numbers[Int(XSBT_SIG_CGT)]) == hex(signalCase.caught), "SigCgt")
        #expect(hex(numbers[Int(XSBT_SIG_BLK)]) == hex(signalCase.blocked), "SigBlk")
    }
}

/// signals.c: the init's signals to the sandbox, as PID 1 of a PID namespace with a payload (a
/// session leader with a child) and another process in it.
@Suite("Signals: the init stops, continues and signals the sandbox")
struct SandboxSignalTests {
    @Test("suspend, resume, a signal to the payload's group, SIGCHLD on the signalfd, the kill")
    func signalsTheSandbox() throws {
        let out = try outcome { xsbt_signal_sandbox($0) }
        try #require(out.ranThrough && out.result == 0, "\(out.failure), init status \(out.result)\n\(out.report)")
        #expect(out.report == """
            stop 0 TTT
            continue 0
            continued 0 SSS
            signal 0 0
            signal 65 0 SSS
            SIGTERM to the payload 0
            payload ended by \(SIGTERM)
            its child ended by \(SIGTERM) S
            child exits readable 1
            after draining 0
            the other ended by \(SIGKILL)

            """)
    }
}
