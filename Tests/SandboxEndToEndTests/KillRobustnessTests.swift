import Foundation
import Glibc
import Testing
import TestSupport

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
    func killUnderSignals(caller: Fixtures.Caller) async throws {
        // 50 runs, one after another (each waits off the concurrency pool, see Fixtures.run).
        var results: [Fixtures.Output] = []
        for _ in 1...50 {
            results.append(try await Fixtures.exec([Fixtures.probe, "kill-under-signals"], as: caller))
        }
        for (run, result) in results.enumerated() {
            let context = Comment(rawValue: "run \(run + 1) as \(caller): status \(result.status)\nstdout: \(result.stdout)\nstderr: \(result.stderr)")
            #expect(result.status == 128 + SIGSYS, context)
            #expect(!result.stdout.contains("ESCAPED"), context)
            #expect(result.stderr.contains("killed: seccomp violation: "), context)
        }
    }

    /// An ERRNO action outranks USER_NOTIF, so a filter the program stacks on its own could
    /// turn a kill-listed call into a plain error. Every compiled filter refuses to let a
    /// filter be installed; were one installed anyway, the call must still kill.
    @Test("a filter the program stacks cannot turn a kill into an errno", arguments: Fixtures.Caller.allCases)
    func stackedFilter(caller: Fixtures.Caller) async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "stacked-errno"], as: caller)
        let context = Comment(rawValue: "as \(caller): status \(result.status)\nstdout: \(result.stdout)\nstderr: \(result.stderr)")
        let refused = result.status == 0 && result.stdout.contains("stacked-errno: blocked (EPERM)")
        let killed = result.status == 128 + SIGSYS && result.stderr.contains("killed: seccomp violation: ptrace")
        #expect(refused || killed, context)
    }
}
