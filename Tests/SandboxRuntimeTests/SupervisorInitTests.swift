import Testing
import TestSupport
@testable import SandboxRuntime

/// `Supervisor.init` declares `SandboxError`, as a launch does: a host that makes its own
/// supervisor reads the failed step and `errno` without a cast (the `catch` below reads
/// `error.step`, which compiles only because the thrown type is known).
@Suite("A supervisor's creation, typed")
struct SupervisorInitTests {
    @Test("a supervisor is made with its threads, or fails with the step that could not be set up")
    func madeOrTypedFailure() {
        do {
            let supervisor = try Supervisor(cgroups: nil)
            #expect(!supervisor.hasCgroupLimits)
        } catch {
            Issue.record("no supervisor: step \(error.step), errno \(error.errorNumber): \(error)")
        }
    }

    /// `extsandbox exec` starts the shared supervisor on a thread of its own while it prepares
    /// its launch: the supervisor its launch then uses is that one, running, with the init found.
    @Test("the shared supervisor started ahead on its own thread is the one `shared` gives, with the init found")
    func startedAhead() async {
        Supervisor.startSharedInAdvance()
        guard case .started(let started) = Supervisor.sharedStart else {
            Issue.record("the shared supervisor did not start")
            return
        }
        #expect(started === Supervisor.shared)
        #expect(await Fixtures.eventually { started.hasFoundInit }, "the start thread did not find the sandbox init")
    }
}
