import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem
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
        /// Told once the sandbox has ended: ``waitForExit()``'s continuations and ``whenEnded(_:)``'s handlers.
        var exitWaiters: [@Sendable (Termination) -> Void] = []
        /// Told after `exitWaiters`: the supervisor's own work on an end (``afterEnded(_:)``).
        var lateExitWaiters: [@Sendable (Termination) -> Void] = []
        /// Every request sent and not yet acknowledged, in the order sent (the init answers in
        /// that order): the caller waiting for each, or nil for one nobody waits for
        /// (``signalWithoutWaiting(_:)``), whose acknowledgement is dropped.
        var ackWaiters: [AckWaiter] = []
        var payloadStatus: Int32?
        var violation: Termination?
        var killCause: KillCause?
        /// The init's control socket: messages, and its hang-up is the init's exit (the host
        /// holds no pidfd per sandbox: InitProcess.swift). Nil once closed, which happens only
        /// after its registration (`controlToken`) is removed from the monitor.
        var controlFD: FileDescriptor?
        var controlToken: UInt64?
        /// A pidfd opened only for the moments between the hang-up and the exit being
        /// reapable, with its registration (removed before the pidfd closes).
        var exitWatch: (fd: FileDescriptor, token: UInt64)?
        /// The sandbox's mount namespace, which the init passes with its EXIT report: held until
        /// the end is reported, so that the unmounting is not in the init's exit
        /// (MountNamespaceRelease.swift).
        var mountNamespace: FileDescriptor?
        /// Whether the kernel's OOM killer acted in the sandbox, read before its memory cgroup is
        /// removed (nil: not read yet; false also when it cannot change how the sandbox ended).
        var memoryLimitHit: Bool?
        var audited: Set<String> = []
        /// Set once the cgroups are gone too: what waitForExit() returns.
        var finished: Termination?
    }

    /// A request sent to the init and the caller waiting for its acknowledgement, if any. A
    /// struct, not a tuple: the monitor thread needs this type at every sandbox's end, and a
    /// tuple's runtime type is made from its mangled name at its first use in a process, which
    /// cost more than the rest of a one-shot command's end.
    struct AckWaiter {
        let type: UInt32
        let continuation: CheckedContinuation<Int32, any Error>?
    }

    private let state: Mutex<State>
    private let monitor: EventMonitor
    private let cgroup: SandboxCgroup?

    init(result: xsb_spawn_result, monitor: EventMonitor, cgroup: SandboxCgroup?) {
        pid = result.pid
        payloadPIDInside = result.payload_pid
        self.monitor = monitor
        self.cgroup = cgroup
        // The pidfd served the launch; from now on the control socket tells the exit.
        FileDescriptor(adopting: result.pidfd)?.close()
        var initial = State(controlFD: FileDescriptor(adopting: result.control_fd))
        withUnsafeBytes(of: result.audited) { raw in
            for number in raw.bindMemory(to: Int32.self).prefix(Int(result.audited_count)) {
                initial.audited.insert(Self.syscallName(number))
            }
        }
        // The program was stopped by its filter before the launch returned: same as later.
        if result.early_violation != Int32(XSB_NO_VIOLATION) { Self.recordViolation(result.early_violation, pid: pid, in: &initial) }
        state = Mutex(initial)
    }

    /// The sandbox's cgroup directories (removed by the time ``waitForExit()`` returns).
    var cgroupDirectories: [String] { cgroup?.directories ?? [] }

    /// Audit mode: the syscalls the policy would have killed, sorted by name.
    public var auditedSyscalls: [String] { state.withLock { $0.audited.sorted() } }

    static func syscallName(_ number: Int32) -> String {
        Syscalls.name(of: number) ?? "syscall \(number)"
    }

    /// `number` is a syscall number, or XSB_UNNAMED_VIOLATION for a call a signal withdrew
    /// before the init could read it.
    private static func recordViolation(_ number: Int32, pid: pid_t, in state: inout State) {
        if state.violation == nil {
            let name = number >= 0 ? syscallName(number) : nil
            state.violation = .seccompViolation(syscall: name)
        }
        // The init is ending the sandbox already (the call never runs: its task is killed
        // while it waits for an answer); the SIGKILL makes sure.
        if state.termination == nil { SandboxSignals.killInit(pid: pid, controlFD: state.controlFD) }
    }

    /// Starts watching; until then nothing is delivered. Called once by the supervisor.
    func startMonitoring() throws(SandboxError) {
        // Added under the lock: the handler (which takes it) cannot run before the token is
        // recorded, or it could not remove its registration.
        try state.withLock { state throws(SandboxError) in
            guard let control = state.controlFD else {
                throw SandboxError(step: .control, errorNumber: EBADF, detail: "the launch returned no control socket")
            }
            do throws(EventMonitor.Failure) {
                state.controlToken = try monitor.add(fd: control) { [self] events in self.controlReadable(events) }
            } catch {
                throw SandboxError(error)
            }
        }
    }

    /// Undoes a launch whose monitoring could not start: kill, reap, close, remove the cgroup.
    func abandon() {
        let (control, token) = state.withLock { state in
            SandboxSignals.killInit(pid: pid, controlFD: state.controlFD)
            state.termination = .killed
            defer { state.controlFD = nil; state.controlToken = nil }
            return (state.controlFD, state.controlToken)
        }
        if let control, let token { monitor.remove(fd: control, token: token) }
        InitProcess.reapBlocking(pid)
        control?.close()
        cgroup?.remove()
        state.withLock { $0.finished = .killed }
    }

    /// Whether the sandbox still runs.
    public var isRunning: Bool { state.withLock { $0.termination == nil } }

    /// Waits until the sandbox has ended (every process of it is gone) and returns how.
    public func waitForExit() async -> Termination {
        await withCheckedContinuation { continuation in
            whenEnded { continuation.resume(returning: $0) }
        }
    }

    /// ``waitForExit()`` for a caller that blocks its thread meanwhile (a one-shot command's
    /// main thread): woken by the thread that saw the end, with no task to resume. Never call
    /// it on a thread of the concurrency pool: it would block that thread until the end.
    package func waitForExitBlocking() -> Termination {
        let ended = BlockingValue<Termination>()
        whenEnded { ended.set($0) }
        return ended.wait()
    }

    /// Calls `handler` once the sandbox has ended, with how (at once, on this thread, if it has
    /// ended already), on the thread that saw the end: it must not block. A host that watches
    /// each of thousands of extensions for its end keeps one closure per sandbox this way rather
    /// than a suspended task, which costs the host more memory per extension.
    package func whenEnded(_ handler: @escaping @Sendable (Termination) -> Void) {
        let finished = state.withLock { state -> Termination? in
            if let termination = state.finished { return termination }
            state.exitWaiters.append(handler)
            return nil
        }
        if let finished { handler(finished) }
    }

    /// ``whenEnded(_:)`` for the supervisor's own work on an end (a pool's refill): told after
    /// every waiter registered before the end, so that whoever waits for it hears of it first.
    func afterEnded(_ handler: @escaping @Sendable (Termination) -> Void) {
        let finished = state.withLock { state -> Termination? in
            if let termination = state.finished { return termination }
            state.lateExitWaiters.append(handler)
            return nil
        }
        if let finished { handler(finished) }
    }

    /// Kills every process of the sandbox (SIGKILL to its init ends the PID namespace). When no
    /// pidfd can be opened (the host at its fd limit), the init is asked to kill the program,
    /// and the sandbox ends with it.
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
            guard !SandboxSignals.killInit(pid: pid, controlFD: state.controlFD),
                  let control = state.controlFD, !InitProcess.hungUp(control) else { return }
            // The init runs, but no pidfd could be opened for it (the host at its fd limit): the
            // init kills the program instead, and the sandbox ends with it. Its acknowledgement
            // keeps its place in the queue.
            let request = SandboxSignals.Request.signal(SIGKILL)
            if SandboxSignals.send(request, on: control) == 0 {
                state.ackWaiters.append(AckWaiter(type: request.messageType, continuation: nil))
            }
        }
    }

    /// Stops every process in the sandbox (SIGSTOP from its init to the whole namespace, so a
    /// child the program forked stops too).
    public func suspend() async throws {
        try await control(.suspend)
    }

    /// Continues every process in the sandbox.
    public func resume() async throws {
        try await control(.resume)
    }

    /// Sends `signal` to the program's process group (it leads its own session).
    public func signal(_ signal: Int32) async throws {
        try await control(.signal(signal))
    }

    /// ``signal(_:)`` without waiting for the init's acknowledgement (which is then dropped),
    /// from any thread and without a task: for relaying the caller's own signals. Does nothing
    /// once the sandbox has ended.
    package func signalWithoutWaiting(_ signal: Int32) {
        state.withLock { state in
            guard state.termination == nil, let control = state.controlFD else { return }
            let request = SandboxSignals.Request.signal(signal)
            // Its acknowledgement takes its place in the queue, so that it never answers a waiter's request.
            if SandboxSignals.send(request, on: control) == 0 { state.ackWaiters.append(AckWaiter(type: request.messageType, continuation: nil)) }
        }
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

    private func control(_ request: SandboxSignals.Request) async throws {
        let err: Int32 = try await withCheckedThrowingContinuation { continuation in
            state.withLock { state in
                guard state.termination == nil else {
                    continuation.resume(throwing: SandboxError(step: .control, errorNumber: ESRCH, detail: "the sandbox has ended"))
                    return
                }
                state.ackWaiters.append(AckWaiter(type: request.messageType, continuation: continuation))
                let rc = state.controlFD.map { SandboxSignals.send(request, on: $0) } ?? -EBADF
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
        let endOfFile = drainControl()
        guard endOfFile || events & (EventMonitor.hangUp | EventMonitor.error) != 0 else { return }
        // The init has closed its end: it is exiting. Level-triggered, the hang-up would wake
        // this thread again and again: stop watching the socket (every message is read).
        let (control, token) = state.withLock { state in
            defer { state.controlToken = nil }
            return (state.controlFD, state.controlToken)
        }
        if let control, let token { monitor.remove(fd: control, token: token) }
        initExiting()
    }

    /// Reads every pending message. Returns true at end of file (the init has exited).
    @discardableResult
    private func drainControl() -> Bool {
        state.withLock { state in
            var message = xsb_msg()
            while let control = state.controlFD {
                var passed: Int32 = -1
                let got = xsb_recv_msg_with_fd(control.rawValue, &message, &passed)
                var namespace = FileDescriptor(adopting: passed)
                defer { namespace?.close() }
                if got < 0 { return got == -EPIPE }
                if got == 0 { return false }
                switch message.type {
                case UInt32(XSB_MSG_EXIT.rawValue):
                    state.payloadStatus = message.value
                    if state.mountNamespace == nil { swap(&state.mountNamespace, &namespace) }
                case UInt32(XSB_MSG_VIOLATION.rawValue):
                    Self.recordViolation(message.value, pid: pid, in: &state)
                case UInt32(XSB_MSG_AUDITED.rawValue):
                    state.audited.insert(Self.syscallName(message.value))
                case UInt32(XSB_MSG_ACK.rawValue):
                    if let index = state.ackWaiters.firstIndex(where: { $0.type == UInt32(bitPattern: message.value) }) {
                        state.ackWaiters.remove(at: index).continuation?.resume(returning: message.value2)
                    }
                default:
                    break
                }
            }
            return false
        }
    }

    /// The control socket has hung up: reap the init, or watch it until it can be reaped.
    private func initExiting() {
        // The init's cgroups are usually empty by now (its files close a little before its
        // cgroup_exit; the rest of the namespace went before its EXIT): removing them first
        // lets the rest of its exit run meanwhile, so that the reap below is usually the first.
        // Whatever is still busy is removed after the reap, as before.
        if let cgroup {
            // Read only when the answer can change how the sandbox ended: a program that exited,
            // or died of another signal than SIGKILL, ended that way whatever the OOM killer did.
            let matters = state.withLock { Self.endMayBeTheMemoryLimit($0) }
            let memoryHit = matters && cgroup.memoryLimitHit
            state.withLock { $0.memoryLimitHit = memoryHit }
            _ = cgroup.removeOnce()
        }
        switch InitProcess.reap(pid, tryingFor: Self.reapTries) {
        case .exited, .gone:
            initExited()
        case .running:
            // Still our unreaped child (waitpid just said so): the pid is its own.
            guard let pidfd = InitProcess.openPidfd(pid) else { return reapOffThisThread() }  // EMFILE: a host at its limit
            do {
                // Level-triggered: if it became reapable meanwhile, this fires at once.
                let token = try monitor.add(fd: pidfd) { [self] _ in
                    if InitProcess.reap(pid) != .running { initExited() }
                }
                state.withLock { $0.exitWatch = (pidfd, token) }
            } catch {
                pidfd.close()
                reapOffThisThread()
            }
        }
    }

    /// How long the monitor thread tries to reap an init whose control socket hung up before it
    /// watches a pidfd instead (microseconds).
    static let reapTries = 100

    /// Without a pidfd to watch: a thread of its own waits for the exit (the init is in its last
    /// moments, but the kernel may still be tearing down its namespace: not on this thread).
    private func reapOffThisThread() {
        do {
            try SupervisorThread.start(name: "xsb-reap", stackSize: 256 << 10) { [self] in
                InitProcess.reapBlocking(pid)
                initExited()
            }
        } catch {
            Task.detached { [self] in
                InitProcess.reapBlocking(pid)
                initExited()
            }
        }
    }

    /// The init is reaped: every process of the namespace is gone.
    private func initExited() {
        let memoryHitBefore = state.withLock { $0.memoryLimitHit }
        let memoryHit = memoryHitBefore ?? cgroup?.memoryLimitHit ?? false
        let (termination, control, watch) = state.withLock { state in
            let termination = Self.termination(state: state, memoryLimitHit: memoryHit)
            state.termination = termination
            defer {
                state.controlFD = nil
                state.controlToken = nil
                state.exitWatch = nil
            }
            return (termination, (state.controlFD, state.controlToken), state.exitWatch)
        }
        // Each registration goes before its fd closes: a number reused while still registered
        // would deliver someone else's events here.
        if let fd = control.0, let token = control.1 { monitor.remove(fd: fd, token: token) }
        control.0?.close()
        if let watch {
            monitor.remove(fd: watch.fd, token: watch.token)
            watch.fd.close()
        }
        // The cgroups go before anyone hears of the end (off the monitor thread when the kernel
        // still holds one: Cgroups.swift).
        guard let cgroup else { return finish(termination) }
        cgroup.removeWithoutBlocking { [self] in finish(termination) }
    }

    /// Everything of the sandbox is gone (processes, fds, cgroups): tell the waiters.
    private func finish(_ termination: Termination) {
        let (waiters, acks, namespace) = state.withLock { state in
            state.finished = termination
            defer {
                state.exitWaiters.removeAll()
                state.lateExitWaiters.removeAll()
                state.ackWaiters.removeAll()
                state.mountNamespace = nil
            }
            return (state.exitWaiters + state.lateExitWaiters, state.ackWaiters.compactMap(\.continuation), state.mountNamespace)
        }
        let tell = {
            for ack in acks { ack.resume(throwing: SandboxError(step: .control, errorNumber: ESRCH, detail: "the sandbox has ended")) }
            for waiter in waiters { waiter(termination) }
        }
        // Closed once they are told, on a thread of its own: the unmounting is nobody's wait.
        if let namespace { MountNamespaceRelease.shared.release(namespace, after: tell) } else { tell() }
    }

    /// Whether the OOM killer's count can change how `state` ended (``termination(state:memoryLimitHit:)``).
    private static func endMayBeTheMemoryLimit(_ state: State) -> Bool {
        termination(state: state, memoryLimitHit: true) != termination(state: state, memoryLimitHit: false)
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
