import Glibc
import SandboxPolicy

/// Why a launch or a lifecycle operation failed: the step, the system error, and the object
/// (a path, a file, a syscall) it concerned.
///
/// Every isolation step that fails ends the launch with one of these: extsandbox never runs a
/// program with less isolation than its policy asks for.
public struct SandboxError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The step that failed.
    public var step: Step
    /// `errno` of the failing call, 0 when there is none.
    public var errorNumber: Int32
    /// The object of the step: a path, a file, a syscall.
    public var detail: String
    /// What to do about it, when the cause is one a caller can act on: the host (EMFILE) or
    /// the system (ENFILE) out of file descriptors says how many are open and the limit.
    public var advice: String?
    /// The policy's own error, for a policy that could not be compiled (step ``Step/policy``):
    /// it names the file and line.
    public var policyError: PolicyError?

    public init(step: Step, errorNumber: Int32 = 0, detail: String) {
        self.step = step
        self.errorNumber = errorNumber
        self.detail = detail
        // (Not for the payload's own limits: an EMFILE there is its policy's open-files.)
        if step != .configuration && step != .resourceLimit && FileDescriptorLimit.isExhaustion(errorNumber) {
            advice = FileDescriptorLimit.exhaustionAdvice(errorNumber)
        }
    }

    /// A policy whose seccomp filter could not be compiled: step ``Step/policy``, its error kept.
    public init(policy name: String, _ error: PolicyError) {
        self.init(step: .policy, detail: "\(name): \(error)")
        policyError = error
    }

    public var description: String {
        var text = "\(step.name) failed"
        if !detail.isEmpty { text += ": \(detail)" }
        if errorNumber != 0 { text += ": \(String(cString: strerror(errorNumber))) (errno \(errorNumber))" }
        if let advice { text += ": \(advice)" }
        return text
    }
}
