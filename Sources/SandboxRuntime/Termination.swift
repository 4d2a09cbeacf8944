import Glibc

/// How a sandboxed program ended.
public enum Termination: Sendable, Equatable, CustomStringConvertible {
    /// It exited with this status.
    case exited(code: Int32)
    /// A signal killed it (from inside the sandbox, or a crash).
    case signaled(signal: Int32)
    /// The seccomp filter stopped a system call and the sandbox was killed. `syscall` is the
    /// call's name; `nil` when it is not known: the kernel killed the program directly (a
    /// foreign-architecture or x32 call), or a signal withdrew the call before the sandbox
    /// init could read which it was (the sandbox is killed all the same).
    case seccompViolation(syscall: String?)
    /// The sandbox's memory limit (cgroup) was exceeded and the kernel killed it.
    case memoryLimitExceeded
    /// The policy's wall-clock limit ran out and the supervisor killed it.
    case wallClockLimitExceeded
    /// The supervisor's ``SandboxedProcess/kill()`` or someone outside killed it.
    case killed

    /// The exit status a shell would show: the code, or 128 + the signal.
    public var shellExitCode: Int32 {
        switch self {
        case .exited(let code): return code
        case .signaled(let signal): return 128 + signal
        case .seccompViolation: return 128 + SIGSYS
        case .memoryLimitExceeded, .wallClockLimitExceeded, .killed: return 128 + SIGKILL
        }
    }

    public var description: String {
        switch self {
        case .exited(let code): return "exited with status \(code)"
        case .signaled(let signal): return "killed by signal \(signal) (\(String(cString: strsignal(signal))))"
        case .seccompViolation(let name?): return "seccomp violation: \(name)"
        case .seccompViolation(nil): return "seccomp violation: a system call that could not be named (foreign-architecture or x32, or interrupted by a signal)"
        case .memoryLimitExceeded: return "memory limit exceeded"
        case .wallClockLimitExceeded: return "wall-clock limit exceeded"
        case .killed: return "killed"
        }
    }
}
