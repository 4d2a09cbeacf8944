import Foundation
import Glibc
import Testing

/// "Kill" means kill: a call the policy kills ends the sandbox whatever the program does
/// around it (issue 9, item 3).
@Suite("A kill cannot be defeated")
struct KillRobustnessTests {
    /// A signal that arrives while the call waits for its seccomp notification to be read
    /// withdraws the notification (the call returns EINTR). A supervisor that watched the
    /// listener with epoll never saw those, and the program lived on in about a third of the
    /// runs; the sandbox init's receiver, blocked in SECCOMP_IOCTL_NOTIF_RECV, is woken for
    /// each one and ends the sandbox (naming the call when it can).
    @Test("a kill-listed call interrupted by a flood of signals still kills the sandbox", arguments: Fixtures.Caller.allCases)
    func killUnderSignals(caller: Fixtures.Caller) throws {
        var named = 0
        let runs = 50
        for run in 1...runs {
            let result = try Fixtures.exec([Fixtures.probe, "kill-under-signals"], as: caller)
            let context = Comment(rawValue: "run \(run) as \(caller): status \(result.status)\nstdout: \(result.stdout)\nstderr: \(result.stderr)")
            #expect(result.status == 128 + SIGSYS, context)
            #expect(!result.stdout.contains("ESCAPED"), context)
            #expect(result.stderr.contains("killed: seccomp violation: "), context)
            if result.stderr.contains("killed: seccomp violation: ptrace\n") { named += 1 }
        }
        // Most are read before a signal can withdraw them, and a withdrawn one is named when
        // the program makes the call again at once; the rest are reported without a name.
        print("kill-under-signals as \(caller): \(named) of \(runs) named, the rest unnamed")
    }
}
