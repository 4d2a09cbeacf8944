import CSandboxShim
import Glibc
import SandboxPolicy
import Synchronization

/// A running sandbox: its init (PID 1 inside) and the program it runs.
///
/// Exit, violations (reported by the sandbox init, which reads the seccomp notifications) and
/// control replies arrive on the supervisor's monitor thread; this type turns them into one
/// ``Termination`` that every ``waitForExit()`` receives.
public final class SandboxedProcess: Sendable {
    /// The sandbox init's pid in the supervisor's PID namespace.
    public let pid: pid_t
    /// The program's pid inside the sandbox (0 when it was stopped by its filter before the
    /// launch returned).
    public let payloadPIDInside: pid_t

    private enum KillCause { case requested, wallClock }

    private struct State {
        var termination: Termination?
        var exitWaiters: [CheckedContinuation<Termination, Never>] = []
        var ackWaiters: [(type: UInt32, continuation: CheckedContinuation<Int32, any Error>)] = []
        var payloadStatus: Int32?
        var violation: Termination?
        var killCause: KillCause?
        var pidfd: Int32
        var controlFD: Int32
        var tokens: [Int32: UInt64] = [:]
        var audited: Set<String> = []
    }

    private let state: Mutex<State>
    private let monitor: EventMonitor
    private let cgroup: SandboxCgroup?

    init(result: xsb_spawn_result, monitor: EventMonitor, cgroup: SandboxCgroup?) {
        pid = result.pid
        payloadPIDInside = result.payload_pid
        self.monitor = monitor
        self.cgroup = cgroup
        var initial = State(pidfd: result.pidfd, controlFD: result.control_fd)
        withUnsafeBytes(of: result.audited) { raw in
            for number in raw.bindMemory(to: Int32.self).prefix(Int(result.audited_count)) {
                initial.audited.insert(Self.syscallName(number))
            }
        }
        // The program was stopped by its filter before the launch returned: same as later.
        if result.early_violation != Int32(XSB_NO_VIOLATION) { Self.recordViolation(result.early_violation, in: &initial) }
        state = Mutex(initial)
    }

    /// Audit mode: the syscalls the policy would have killed, sorted by name.
    public var auditedSyscalls: [String] { state.withLock { $0.audited.sorted() } }

    static func syscallName(_ number: Int32) -> String {
        Syscalls.name(of: number) ?? "syscall \(number)"
    }

    /// `number` is a syscall number, or XSB_UNNAMED_VIOLATION for a call a signal withdrew
    /// before the init could read it.
    private static func recordViolation(_ number: Int32, in state: inout State) {
        if state.violation == nil {
            let name = number >= 0 ? syscallName(number) : nil
            state.violation = .seccompViolation(syscall: name)
        }
        // The init is ending the sandbox already (the call never runs: its task is killed
        // while it waits for an answer); the SIGKILL makes sure.
        if state.termination == nil { _ = xsb_pidfd_send_signal(state.pidfd, SIGKILL) }
    }

    /// Starts watching; until then nothing is delivered. Called once by the supervisor.
    func startMonitoring() throws {
        let (pidfd, control) = state.withLock { ($0.pidfd, $0.controlFD) }
        let handlers: [(Int32, EventMonitor.Handler)] = [
            (control, { [self] events in self.controlReadable(events) }),
            (pidfd, { [self] _ in self.initExited() }),
        ]
        for (fd, handler) in handlers {
            // Each token is recorded at once, so a failure half-way leaves nothing registered.
            let token = try monitor.add(fd: fd, handler: handler)
            state.withLock { $0.tokens[fd] = token }
        }
    }

    /// Undoes a launch whose monitoring could not start: kill, reap, close, remove the cgroup.
    func abandon() {
        state.withLock { state in
            for (fd, token) in state.tokens { monitor.remove(fd: fd, token: token) }
            state.tokens.removeAll()
            _ = xsb_pidfd_send_signal(state.pidfd, SIGKILL)
            _ = xsb_pidfd_wait(state.pidfd)
            for fd in [state.pidfd, state.controlFD] where fd >= 0 { close(fd) }
            state.pidfd = -1
            state.controlFD = -1
            state.termination = .killed
        }
        cgroup?.remove()
    }

    /// Whether the sandbox still runs.
    public var isRunning: Bool { state.withLock { $0.termination == nil } }

    /// Waits until the sandbox has ended (every process of it is gone) and returns how.
    public func waitForExit() async -> Termination {
        await withCheckedContinuation { continuation in
            state.withLock { state in
                if let termination = state.termination {
                    continuation.resume(returning: termination)
                } else {
                    state.exitWaiters.append(continuation)
                }
            }
        }
    }

    /// Kills every process of the sandbox (SIGKILL to its init ends the PID namespace).
    public func kill() {
        kill(cause: .requested)
    }

    func killForWallClock() {
        kill(cause: .wallClock)
    }

    private func kill(cause: KillCause) {
        state.withLock { state in
            guard state.termination == nil else { return }
            if state.killCause == nil { state.killCause = cause }
            _ = xsb_pidfd_send_signal(state.pidfd, SIGKILL)
        }
    }

    /// Stops every process in the sandbox (SIGSTOP from its init to the whole namespace, so a
    /// child the program forked stops too).
    public func suspend() async throws {
        try await control(UInt32(XSB_MSG_SUSPEND.rawValue))
    }

    /// Continues every process in the sandbox.
    public func resume() async throws {
        try await control(UInt32(XSB_MSG_RESUME.rawValue))
    }

    /// Sends `signal` to the program's process group (it leads its own session).
    public func signal(_ signal: Int32) async throws {
        try await control(UInt32(XSB_MSG_SIGNAL.rawValue), value: signal)
    }

    /// Host pids of every process in the sandbox, the init first. For diagnostics and tests.
    public func processIdentifiers() -> [pid_t] {
        var result: [pid_t] = []
        var queue: [pid_t] = [pid]
        while let next = queue.first {
            queue.removeFirst()
            result.append(next)
            let tasks = SystemFiles.entries("/proc/\(next)/task") ?? []
            for task in tasks {
                guard let text = SystemFiles.text("/proc/\(next)/task/\(task)/children") else { continue }
                queue += text.split(whereSeparator: \.isWhitespace).compactMap { pid_t($0) }
            }
        }
        return result
    }

    private func control(_ type: UInt32, value: Int32 = 0) async throws {
        let err: Int32 = try await withCheckedThrowingContinuation { continuation in
            state.withLock { state in
                guard state.termination == nil else {
                    continuation.resume(throwing: SandboxError(step: .control, errorNumber: ESRCH, detail: "the sandbox has ended"))
                    return
                }
                state.ackWaiters.append((type, continuation))
                let rc = xsb_send_msg(state.controlFD, type, value)
                if rc != 0 {
                    state.ackWaiters.removeLast()
                    continuation.resume(throwing: SandboxError(step: .control, errorNumber: -rc, detail: "control message"))
                }
            }
        }
        if err != 0 { throw SandboxError(step: .control, errorNumber: err, detail: "sandbox init") }
    }

    // MARK: Monitor-thread handlers

    private func controlReadable(_ events: UInt32) {
        drainControl()
        if events & UInt32(XSB_EPOLLHUP | XSB_EPOLLERR) != 0 {
            state.withLock { state in
                if let token = state.tokens.removeValue(forKey: state.controlFD) { monitor.remove(fd: state.controlFD, token: token) }
            }
        }
    }

    private func drainControl() {
        state.withLock { state in
            var message = xsb_msg()
            while state.controlFD >= 0, xsb_recv_msg(state.controlFD, &message) == 1 {
                switch message.type {
                case UInt32(XSB_MSG_EXIT.rawValue):
                    state.payloadStatus = message.value
                case UInt32(XSB_MSG_VIOLATION.rawValue):
                    Self.recordViolation(message.value, in: &state)
                case UInt32(XSB_MSG_AUDITED.rawValue):
                    state.audited.insert(Self.syscallName(message.value))
                case UInt32(XSB_MSG_ACK.rawValue):
                    if let index = state.ackWaiters.firstIndex(where: { $0.type == UInt32(bitPattern: message.value) }) {
                        state.ackWaiters.remove(at: index).continuation.resume(returning: message.value2)
                    }
                default:
                    break
                }
            }
        }
    }

    private func initExited() {
        var status: Int32 = 0
        let reaped = state.withLock { xsb_pidfd_reap($0.pidfd, &status) }
        // 0: a spurious wake-up, it still runs. An error (ECHILD: the host reaped it itself,
        // SIGCHLD ignored or waitpid(-1)) means it is gone too: finish, or the level-triggered
        // pidfd would spin the monitor thread and nobody would learn of the end.
        guard reaped != 0 else { return }
        drainControl()
        let memoryHit = cgroup?.memoryLimitHit ?? false
        let (termination, waiters, acks) = state.withLock { state -> (Termination, [CheckedContinuation<Termination, Never>], [CheckedContinuation<Int32, any Error>]) in
            let termination = Self.termination(state: state, memoryLimitHit: memoryHit)
            state.termination = termination
            for (fd, token) in state.tokens { monitor.remove(fd: fd, token: token) }
            state.tokens.removeAll()
            for fd in [state.pidfd, state.controlFD] where fd >= 0 { close(fd) }
            state.pidfd = -1
            state.controlFD = -1
            let waiters = state.exitWaiters, acks = state.ackWaiters.map(\.continuation)
            state.exitWaiters.removeAll()
            state.ackWaiters.removeAll()
            return (termination, waiters, acks)
        }
        // Every process of the namespace is gone once its init is reaped: the cgroup is empty.
        cgroup?.remove()
        for ack in acks { ack.resume(throwing: SandboxError(step: .control, errorNumber: ESRCH, detail: "the sandbox has ended")) }
        for waiter in waiters { waiter.resume(returning: termination) }
    }

    private static func termination(state: State, memoryLimitHit: Bool) -> Termination {
        if let violation = state.violation { return violation }
        if let status = state.payloadStatus {
            let signal = status & 0x7f
            if signal == 0 { return .exited(code: (status >> 8) & 0xff) }
            if signal == SIGSYS { return .seccompViolation(syscall: nil) }
            if signal == SIGKILL && memoryLimitHit { return .memoryLimitExceeded }
            if signal == SIGKILL, let cause = state.killCause { return cause == .wallClock ? .wallClockLimitExceeded : .killed }
            return .signaled(signal: signal)
        }
        if memoryLimitHit { return .memoryLimitExceeded }
        if state.killCause == .wallClock { return .wallClockLimitExceeded }
        return .killed
    }
}
