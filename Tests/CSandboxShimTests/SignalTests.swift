import CMechanismSupport
import Glibc
import Testing

/// signals.c: what the init and the payload inherit (ignored signals, handlers, a mask) reset.
/// The child starts ignoring SIGPIPE and SIGTERM, catching SIGUSR1 and blocking SIGINT and SIGUSR2.
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
             ignored: bits([SIGPIPE, SIGTERM]), caught: bits([SIGUSR1]), blocked: bits([SIGINT, SIGUSR2])),
        Case(testDescription: "the init's reset: defaults, everything blocked", step: XSBT_INIT_RESET,
             ignored: 0, caught: 0, blocked: everyBlockable),
        Case(testDescription: "the payload's reset: defaults, the mask kept", step: XSBT_PAYLOAD_RESET,
             ignored: 0, caught: 0, blocked: bits([SIGINT, SIGUSR2])),
        Case(testDescription: "the payload's reset and unblock: defaults, nothing blocked", step: XSBT_PAYLOAD_RESET_UNBLOCK,
             ignored: 0, caught: 0, blocked: 0),
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
