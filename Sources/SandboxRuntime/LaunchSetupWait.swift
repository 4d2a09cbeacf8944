import CSandboxShim
import Glibc
import SandboxSystem
import Synchronization

/// Waits for a started sandbox's init to report that its payload has exec'd (or which step
/// failed), as events on the supervisor's monitor thread: no thread of its own per launch,
/// none blocked while the sandbox is built, and the spawner thread goes straight on to the
/// next clone. A timer on the same thread (``EventMonitor/addTimer(milliseconds:handler:)``)
/// ends a build that takes longer than the setup timeout. A caller that blocks anyway (the
/// CLI's one-shot `exec`, on its main thread) waits on its own thread instead, the setup
/// timeout being its poll's (``waitBlocking(for:timeoutMilliseconds:)``).
///
/// The registration is made under the watch's lock, so its handler (which takes the lock) never
/// runs before the token is recorded. Whoever decides first (a decisive message, a failure, the
/// timer) marks the watch done and removes the registration: from the handler on the monitor
/// thread (no wait there; the timer's handler runs there too, outside the lock).
final class LaunchSetupWait: Sendable {
    private enum Outcome: Sendable {
        case ready
        case failed(step: Int32, errorNumber: Int32, detail: String)
        case timedOut
    }

    private struct State {
        var result: xsb_spawn_result
        var token: UInt64?
        var done = false
    }

    private let state: Mutex<State>
    private let outcome = OnceContinuation<Outcome>()
    /// Runs on the monitor thread as the init reports `READY`, before the caller resumes.
    private let whenReady: (@Sendable (xsb_spawn_result) -> Void)?
    private let monitor: EventMonitor
    /// The launch's control socket, lent to the monitor while watched. The C launch owns it
    /// (`xsb_spawn_abandon` closes it; a launch that succeeds hands it on to its
    /// `SandboxedProcess`, which the monitor thread may make before this watch is over):
    /// borrowed, so that nothing here can close it.
    private let control: FileDescriptor

    private init(started: xsb_spawn_result, monitor: EventMonitor, control: FileDescriptor,
                 whenReady: (@Sendable (xsb_spawn_result) -> Void)?) {
        state = Mutex(State(result: started))
        self.monitor = monitor
        self.control = control
        self.whenReady = whenReady
    }

    /// The launch's result: `started` with the payload's pid (or an early violation, audited
    /// calls), or with `failed_step` set and nothing of the sandbox left (killed, reaped, its
    /// fds closed). `whenReady` gets the result on the monitor thread as `READY` arrives, before
    /// this returns (``Supervisor/ReadyWatch``); it must not block.
    static func wait(for started: xsb_spawn_result, on monitor: EventMonitor, timeoutMilliseconds: Int32,
                     whenReady: (@Sendable (xsb_spawn_result) -> Void)? = nil) async -> xsb_spawn_result {
        guard let control = FileDescriptor(borrowing: started.control_fd) else {
            var result = started
            xsb_spawn_abandon(&result, Int32(XSB_STEP_HANDSHAKE.rawValue), EBADF, "the launch returned no control socket")
            return result
        }
        let watch = LaunchSetupWait(started: started, monitor: monitor, control: control, whenReady: whenReady)
        let timer: EventMonitor.Timer
        do throws(EventMonitor.Failure) {
            timer = try monitor.addTimer(milliseconds: Int(timeoutMilliseconds)) { watch.timeUp() }
            do {
                try watch.state.withLock { (state: inout State) throws(EventMonitor.Failure) in
                    state.token = try monitor.add(fd: control) { _ in watch.controlReadable() }
                }
            } catch {
                timer.cancel()
                throw error
            }
        } catch {
            _ = control.release()
            var result = started
            xsb_spawn_abandon(&result, Int32(XSB_STEP_HANDSHAKE.rawValue), error.errorNumber, "watching the control socket: \(error.operation)")
            return result
        }
        let decided = await watch.outcome.value
        timer.cancel()
        // The registration is removed by whoever decided: the number is the launch's again.
        _ = control.release()
        return concluded(watch.state.withLock { $0.result }, decided)
    }

    /// ``wait(for:on:timeoutMilliseconds:)`` on the calling thread, which blocks (in `poll`)
    /// until the init reports or the timeout passes: for a one-shot caller with nothing else to
    /// do meanwhile, which then wakes straight from the kernel, not through the monitor thread.
    static func waitBlocking(for started: xsb_spawn_result, timeoutMilliseconds: Int32) -> xsb_spawn_result {
        var result = started
        guard result.control_fd >= 0 else {
            xsb_spawn_abandon(&result, Int32(XSB_STEP_HANDSHAKE.rawValue), EBADF, "the launch returned no control socket")
            return result
        }
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .milliseconds(timeoutMilliseconds))
        while true {
            if let decided = poll(&result) { return concluded(result, decided) }
            let left = clock.now.duration(to: deadline)
            guard left > .zero else { return concluded(result, .timedOut) }
            // Rounded up: a wait never ends just short of the deadline and spins.
            let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1
            var readable = pollfd(fd: result.control_fd, events: Int16(POLLIN), revents: 0)
            if Glibc.poll(&readable, 1, Int32(clamping: milliseconds)) < 0 && errno != EINTR {
                return concluded(result, .failed(step: Int32(XSB_STEP_HANDSHAKE.rawValue), errorNumber: errno, detail: "waiting for the sandbox's report"))
            }
        }
    }

    /// `result` as the launch returns it once `decided`: a failure or a timeout abandons the
    /// sandbox (killed, reaped, its fds closed).
    private static func concluded(_ result: xsb_spawn_result, _ decided: Outcome) -> xsb_spawn_result {
        var result = result
        switch decided {
        case .ready:
            break
        case .failed(let step, let errorNumber, let detail):
            xsb_spawn_abandon(&result, step, errorNumber, detail)
        case .timedOut:
            xsb_spawn_abandon(&result, Int32(XSB_STEP_TIMEOUT.rawValue), ETIMEDOUT, "sandbox did not start in time")
        }
        return result
    }

    /// Takes the init's reports so far into `result`: nil while it has not decided.
    private static func poll(_ result: inout xsb_spawn_result) -> Outcome? {
        var step: Int32 = 0, errorNumber: Int32 = 0
        var detail = [CChar](repeating: 0, count: 256)
        let taken = xsb_spawn_poll(&result, &step, &errorNumber, &detail, detail.count)
        guard taken != 0 else { return nil }
        return taken > 0 ? .ready : .failed(step: step, errorNumber: errorNumber, detail: String(decoding: detail.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    /// On the monitor thread: takes the init's reports so far.
    private func controlReadable() {
        let decided: (Outcome, xsb_spawn_result)? = state.withLock { state in
            guard !state.done, let decided = Self.poll(&state.result) else { return nil }
            state.done = true
            if let token = state.token { monitor.remove(fd: control, token: token) }
            return (decided, state.result)
        }
        guard let (outcome, result) = decided else { return }
        if case .ready = outcome { whenReady?(result) }
        self.outcome.resume(outcome)
    }

    private func timeUp() {
        let token: UInt64? = state.withLock { state in
            guard !state.done else { return nil }
            state.done = true
            return state.token
        }
        guard let token else { return }
        monitor.remove(fd: control, token: token)
        outcome.resume(.timedOut)
    }
}
