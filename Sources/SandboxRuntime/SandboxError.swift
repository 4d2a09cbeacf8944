import CSandboxShim
import Glibc

/// Why a launch or a lifecycle operation failed: the step, the system error, and the object
/// (a path, a file, a syscall) it concerned.
///
/// Every isolation step that fails ends the launch with one of these: extsandbox never runs a
/// program with less isolation than its policy asks for.
public struct SandboxError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The step that failed.
    public enum Step: Sendable, Equatable {
        /// A step of the C launch pipeline (see `xsb_step` in CSandboxShim).
        case launch(code: Int32)
        case policy
        case configuration
        case cgroup
        case control
    }

    public var step: Step
    /// `errno` of the failing call, 0 when there is none.
    public var errorNumber: Int32
    public var detail: String
    /// What to do about it, when the cause is one a caller can act on: the host (EMFILE) or
    /// the system (ENFILE) out of file descriptors says how many are open and the limit.
    public var advice: String?

    public init(step: Step, errorNumber: Int32 = 0, detail: String) {
        self.step = step
        self.errorNumber = errorNumber
        self.detail = detail
        if step != .configuration && FileDescriptorLimit.isExhaustion(errorNumber) {
            advice = FileDescriptorLimit.exhaustionAdvice(errorNumber)
        }
    }

    /// The step's name, e.g. "bind mount" or "seccomp filter".
    public var stepName: String {
        switch step {
        case .launch(let code): return String(cString: xsb_step_name(code))
        case .policy: return "policy"
        case .configuration: return "configuration"
        case .cgroup: return "cgroup"
        case .control: return "control"
        }
    }

    public var description: String {
        var text = "\(stepName) failed"
        if !detail.isEmpty { text += ": \(detail)" }
        if errorNumber != 0 { text += ": \(String(cString: strerror(errorNumber))) (errno \(errorNumber))" }
        if let advice { text += ": \(advice)" }
        return text
    }

    /// Whether this is the launch step with the given code, e.g. `XSB_STEP_BIND_MOUNT`.
    public func isLaunchStep(_ code: xsb_step) -> Bool {
        step == .launch(code: Int32(code.rawValue))
    }
}
