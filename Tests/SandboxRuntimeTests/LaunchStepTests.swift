import CSandboxShim
import SandboxPolicy
@testable import SandboxRuntime
import Testing
import TestSupport

/// The step a launch failed at is a Swift enum, mapped once from the C side's `xsb_step`.
@Suite("Launch steps", .offThePool)
struct LaunchStepTests {
    @Test("every C launch step has a case of its own, with the C side's name")
    func everyStepMapped() {
        var seen: [SandboxError.Step: Int32] = [:]
        for code in Int32(XSB_STEP_NONE.rawValue + 1)..<Int32(XSB_STEP_COUNT.rawValue) {
            let step = SandboxError.Step(launchCode: code)
            let cName = String(cString: xsb_step_name(code))
            if case .unknown = step {
                Issue.record("xsb_step \(code) (\(cName)) has no case in SandboxError.Step: add one")
                continue
            }
            #expect(step.launchCode == code, "\(step) maps back to \(String(describing: step.launchCode)), not \(code)")
            #expect(step.name == cName)
            if let other = seen.updateValue(code, forKey: step) {
                Issue.record("xsb_step \(other) and \(code) both map to \(step)")
            }
        }
        for own: SandboxError.Step in [.policy, .configuration, .cgroup, .control] {
            #expect(own.launchCode == nil, "\(own) is the supervisor's own step, not a C one")
        }
    }

    @Test("a step value the Swift side does not know arrives as unknown, named by its number")
    func unknownStep() {
        let code = Int32(XSB_STEP_COUNT.rawValue) + 7
        let step = SandboxError.Step(launchCode: code)
        #expect(step == .unknown(code))
        #expect(step.launchCode == code)
        let error = SandboxError(step: step, errorNumber: 0, detail: "somewhere")
        #expect(error.description == "unknown launch step \(code) failed: somewhere")
    }

    @Test("a policy whose filter cannot be compiled fails the launch at the policy step, its PolicyError kept")
    func policyErrorKept() async throws {
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        config.policy.seccomp.rules.append(SyscallRule(syscall: "no_such_syscall_xsb", action: .errno(1)))
        let error = await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        #expect(error?.step == .policy)
        let policyError = try #require(error?.policyError, "\(String(describing: error))")
        #expect(policyError.message.contains("unknown system call \"no_such_syscall_xsb\""), "\(policyError)")
        #expect(policyError.file == config.policy.sourcePath ?? config.policy.name)
        #expect(error?.description.contains("no_such_syscall_xsb") == true)
    }
}
