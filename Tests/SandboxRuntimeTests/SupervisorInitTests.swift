import Testing
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
}
