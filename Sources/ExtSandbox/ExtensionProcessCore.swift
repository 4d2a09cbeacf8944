import ExtSandboxWire
import FoundationEssentials
import Glibc
import Logging
import SandboxRuntime
import SandboxSystem
import Synchronization

/// The process behind every handle of one extension (one `ProcessReuseKey`): its handles, its
/// connections, and its lifecycle.
///
/// **One rule for every transition.** Each lifecycle decision (a handle attaching or going away,
/// a connection starting or closing, an idle timer firing, the extension's GOODBYE, the end) is
/// taken under one lock, `state`, and what it implies for the sandbox (SIGSTOP, SIGCONT, GOODBYE
/// then SIGKILL) is queued, under that same lock, on one chain of transitions that performs them
/// in the order they were decided. Hence:
/// - a handle never attaches to a process that is ending (`attach` refuses, and the caller
///   launches a fresh one);
/// - a connect decided after a suspend continues the sandbox after it was stopped, never before
///   (it is never stopped in the middle of a handshake);
/// - an idle timer carries the generation of the idle period that started it, and does nothing
///   once a connection has started since (a terminate timer never kills a process a connect has
///   just claimed).
///
/// **Lifecycle.** With no connection (including right after launch, before the first one) the
/// sandbox is suspended after `suspendAfter` and ended after `terminateAfter`; with no handle and
/// no connection it is ended at once. Ending on purpose sends GOODBYE on the control socket, so
/// that the extension may exit 0 of its own accord, and SIGKILLs it after ``goodbyeGrace``. The
/// timers are the process's: those of the handle that launched it.
final class ExtensionProcessCore: Sendable {
    let key: ProcessReuseKey
    var identity: AppExtensionIdentity { key.identity }
    let sandbox: SandboxedProcess
    /// Whether the kernel bounds its private container (ExtensionContainer.swift).
    let containerBound: ContainerBound

    /// How long an extension sent GOODBYE (the host ending it) has to exit before it is killed.
    static let goodbyeGrace: Duration = .milliseconds(500)
    /// How long a socket's hang-up waits for the process's end to give the real reason (killed,
    /// crashed) before it is reported as a closed connection. The init's exit is seen a moment
    /// after the payload's sockets close: under load (CI, a busy host) more than 200 ms later.
    /// Only a live extension that closes a connection with requests pending waits this long.
    static let exitAfterHangUpGrace: Duration = .seconds(2)
    /// How long a hang-up waits for the end of a program the kernel already marks as exiting:
    /// its end comes (the init reaps it and reports), only the machine's load says when. A bound
    /// all the same, so that nothing waits forever.
    static let endAfterHangUpLimit: Duration = .seconds(30)

    /// How long a socket's hang-up waits for the process's end, given where the program is; at
    /// most `bound` (what is left of a launch's ready timeout), but never less than the grace.
    static func waitForEndAfterHangUp(_ liveness: ProgramLiveness, bound: Duration = endAfterHangUpLimit) -> Duration {
        liveness == .ending ? max(exitAfterHangUpGrace, min(endAfterHangUpLimit, bound)) : exitAfterHangUpGrace
    }

    enum Phase: Equatable {
        case running, suspended
        /// Being ended (GOODBYE sent or received, or killed), not yet reaped.
        case ending
        case ended
    }

    /// One handle's own configuration and connections.
    private struct HandleEntry {
        let onInterruption: @Sendable (Termination) -> Void
        let onEvent: (@Sendable (AppExtensionLifecycleEvent) -> Void)?
        var connections: Set<UInt64> = []
    }

    /// A connection, counted from the moment a connect claims it (before its socket exists).
    private struct Slot {
        let handle: UUID
        var connection = WeakConnection()
        /// Handshake done: counted in the open-connections meter.
        var established = false
    }

    private struct WeakConnection: @unchecked Sendable {
        weak var connection: ExtensionConnection?
    }

    private struct State {
        var phase = Phase.running
        /// Whether the end was asked for (idle, no handle, the extension's GOODBYE): not an
        /// interruption.
        var endExpected = false
        var control: FrameSocket?
        var controlToken: UInt64?
        var handles: [UUID: HandleEntry] = [:]
        var slots: [UInt64: Slot] = [:]
        var nextConnectionID: UInt64 = 1
        /// Bumped whenever an idle period starts or ends: a timer of an older one does nothing.
        var idleGeneration: UInt64 = 0
        var idleTask: Task<Void, Never>?
        /// The last queued transition; each waits for the one before it.
        var transitions: Task<Bool, Never>?
    }

    private let state: Mutex<State>
    private let suspendAfter: Duration
    private let terminateAfter: Duration
    /// The launching handle's logger, with this process's metadata.
    private let logger: Logger

    /// A launched process, with the launching handle attached. Call ``start()`` next.
    init(key: ProcessReuseKey, sandbox: SandboxedProcess, control: sending FrameSocket,
         configuration: AppExtensionProcess.Configuration, handle: UUID, containerBound: ContainerBound = .noContainer) {
        self.key = key
        self.sandbox = sandbox
        self.containerBound = containerBound
        suspendAfter = configuration.suspendAfter
        terminateAfter = configuration.terminateAfter
        var logger = configuration.logger
        logger[metadataKey: "identifier"] = "\(key.identity.bundleIdentifier)"
        logger[metadataKey: "point"] = "\(key.identity.point.name)"
        logger[metadataKey: "policy"] = "\(key.policy.name)"
        logger[metadataKey: "pid"] = "\(sandbox.pid)"
        self.logger = logger
        var initial = State(control: control)
        initial.handles[handle] = HandleEntry(onInterruption: configuration.onInterruption, onEvent: configuration.onEvent)
        state = Mutex(initial)
    }

    /// Starts watching the control socket (the extension's GOODBYE) and the process's end, and
    /// the idle clock: a process nobody connects to is suspended and ended like any idle one.
    func start() {
        Telemetry.launches.increment()
        // A bundle's path is others' text: escaped for the terminals logs end up on.
        logger.info("extension launched", metadata: ["executable": "\(TerminalText.escaped(key.identity.executablePath))"])
        let watchFailed = state.withLock { state -> Bool in
            guard let fd = state.control?.descriptor else { return false }
            do {
                state.controlToken = try Supervisor.shared.monitor.add(fd: fd) { [weak self] _ in self?.controlReadable() }
                return false
            } catch {
                return true
            }
        }
        // Without the control socket watched, its GOODBYE would read as an interruption: fail closed.
        if watchFailed { sandbox.kill() }
        // A closure until the end, not a task suspended for the extension's whole life.
        sandbox.whenEnded { [self] termination in
            Task.detached { await self.ended(termination) }
        }
        state.withLock { state in
            if state.slots.isEmpty && state.phase == .running { startIdleClock(&state) }
        }
    }

    /// Attaches another handle; false when the process is ending (launch a fresh one), also
    /// when its sandbox has ended and this core has not yet heard (its end is on its way here).
    func attach(handle: UUID, configuration: AppExtensionProcess.Configuration) -> Bool {
        let attached = state.withLock { state -> Bool in
            guard state.phase == .running || state.phase == .suspended, sandbox.isRunning else { return false }
            state.handles[handle] = HandleEntry(onInterruption: configuration.onInterruption, onEvent: configuration.onEvent)
            return true
        }
        if attached { configuration.onEvent?(.reused) }
        return attached
    }

    /// A handle goes away: its connections are severed (invalidated), other handles' stay. With
    /// no handle and no connection left, the process ends.
    func detach(handle: UUID) {
        var established = 0
        let severed = state.withLock { state -> [ExtensionConnection] in
            guard let entry = state.handles.removeValue(forKey: handle) else { return [] }
            let wasBusy = !state.slots.isEmpty
            var severed: [ExtensionConnection] = []
            for id in entry.connections {
                guard let slot = state.slots.removeValue(forKey: id) else { continue }
                if slot.established { established += 1 }
                if let connection = slot.connection.connection { severed.append(connection) }
            }
            if state.slots.isEmpty && (wasBusy || state.handles.isEmpty) { becameIdle(&state) }
            return severed
        }
        if established > 0 { Telemetry.openConnections.decrement(by: Double(established)) }
        // Their close finds no slot any more: nothing is counted twice.
        for connection in severed { connection.invalidate() }
    }

    enum ConnectOutcome {
        case connected(ExtensionConnection)
        /// The process ended or is ending (the handle has been told, or will be): launch a fresh one.
        case processEnded
    }

    /// A new connection for `handle`: claims it (no suspend or end from now on), resumes a
    /// suspended sandbox, hands the extension its socket, shakes hands.
    func connect(handle: UUID, timeout: Duration, sendQueueLimit: ExtensionConnection.SendQueueLimit,
                 handlers: ExtensionConnection.Handlers) async throws(ExtensionError) -> ConnectOutcome {
        enum Claim { case claimed(UInt64, Task<Bool, Never>?), ended, invalidated }
        let claim = state.withLock { state -> Claim in
            guard state.phase == .running || state.phase == .suspended else { return .ended }
            guard state.handles[handle] != nil else { return .invalidated }
            stopIdleClock(&state)
            let id = state.nextConnectionID
            state.nextConnectionID += 1
            state.slots[id] = Slot(handle: handle)
            state.handles[handle]?.connections.insert(id)
            var resumed: Task<Bool, Never>?
            if state.phase == .suspended {
                state.phase = .running
                resumed = queueTransition(&state) { [sandbox] in (try? await sandbox.resume()) != nil }
            }
            return .claimed(id, resumed)
        }
        let connectionID: UInt64
        switch claim {
        case .ended: return .processEnded
        case .invalidated: throw .invalidated
        case .claimed(let id, let resumed):
            connectionID = id
            if let resumed {
                guard await resumed.value else {
                    // Not continued: a sandbox in an unknown state is not used again (the
                    // handle hears its end).
                    sandboxUnresponsive()
                    releaseSlot(id)
                    return .processEnded
                }
                emit(.resumed)
            }
        }
        var handedOver = false
        do throws(ExtensionError) {
            let (hostFD, extensionFD): (FileDescriptor, FileDescriptor)
            do throws(WireError) {
                (hostFD, extensionFD) = try SpareSocketPair.take()
            } catch {
                throw .protocolError(error)
            }
            // The host's HELLO goes into the socket before the extension has its end: it finds
            // the HELLO there as soon as it takes the connection.
            let connection = ExtensionConnection(
                descriptor: hostFD, monitor: Supervisor.shared.monitor, name: identity.bundleIdentifier,
                sendQueueLimit: sendQueueLimit, handlers: handlers, programLiveness: { [sandbox] in sandbox.programLiveness() }
            ) { [weak self] in self?.releaseSlot(connectionID) }
            // From here on the connection's own close releases the slot (once).
            handedOver = true
            enum Refusal: Error { case ended, invalidated, failed(ExtensionError) }
            let refusal: Refusal? = state.withLock { state in
                guard state.phase == .running, let control = state.control else {
                    extensionFD.close()
                    return .ended
                }
                // The handle was invalidated meanwhile (its slots went with it).
                guard state.slots[connectionID] != nil else {
                    extensionFD.close()
                    return .invalidated
                }
                // Its HELLO could not be written: it has closed (and reported it) already.
                // (The connection never takes this lock while holding its own.)
                guard connection.isOpen else {
                    extensionFD.close()
                    return .failed(.connectionClosed(detail: "the HELLO could not be written"))
                }
                // An interruption from now on fails the handshake with its reason.
                state.slots[connectionID]?.connection.connection = connection
                do throws(WireError) {
                    // enqueue takes the fd over (closes it once written); a control socket that does
                    // not drain means an extension that does not accept: refuse rather than block.
                    try control.enqueue(.connect(id: connectionID, descriptor: extensionFD))
                    if control.hasPendingOutput { return .failed(.connectionClosed(detail: "the extension is not accepting connections")) }
                    return nil
                } catch .connectionClosed {
                    // Most often the extension has just died and its end is not known yet: a
                    // fresh process takes the connection (the handle hears this one's end).
                    becameUnusable(&state)
                    return .ended
                } catch {
                    return .failed(.protocolError(error))
                }
            }
            switch refusal {
            case nil: break
            case .ended:
                connection.close(because: .connectionClosed(detail: "the extension has ended"))
                return .processEnded
            case .invalidated:
                connection.close(because: .invalidated)
                throw .invalidated
            case .failed(let failure):
                connection.close(because: failure)
                throw failure
            }
            do throws(ExtensionError) {
                try await connection.handshake(timeout: timeout)
            } catch {
                // The extension left of its own accord (its GOODBYE) as this connection came
                // in, and never took it: a fresh process does, as after any end.
                if case .rejected = error { throw error }
                if state.withLock({ $0.endExpected }) { return .processEnded }
                throw error
            }
            let counted = state.withLock { state -> Bool in
                guard state.slots[connectionID] != nil else { return false }
                state.slots[connectionID]?.established = true
                return true
            }
            if counted { Telemetry.openConnections.increment() }
            return .connected(connection)
        } catch {
            if !handedOver { releaseSlot(connectionID) }
            throw error
        }
    }

    /// A connection is gone (closed, or never made): with none left, the idle clock starts.
    private func releaseSlot(_ id: UInt64) {
        // The socket pair for the next connection, made off any connection's set-up.
        defer { SpareSocketPair.prepare() }
        let established = state.withLock { state -> Bool in
            guard let slot = state.slots.removeValue(forKey: id) else { return false }
            state.handles[slot.handle]?.connections.remove(id)
            if state.slots.isEmpty { becameIdle(&state) }
            return slot.established
        }
        if established { Telemetry.openConnections.decrement() }
    }

    // MARK: Transitions (all under `state`)

    /// No connection any more: end now if no handle wants the process, else start the idle clock.
    private func becameIdle(_ state: inout State) {
        guard state.phase == .running || state.phase == .suspended else { return }
        if state.handles.isEmpty {
            beginEnd(&state)
        } else {
            startIdleClock(&state)
        }
    }

    private func startIdleClock(_ state: inout State) {
        stopIdleClock(&state)
        let generation = state.idleGeneration
        let suspendAfter = suspendAfter, terminateAfter = terminateAfter
        state.idleTask = Task { [weak self] in
            try? await Task.sleep(for: suspendAfter)
            guard !Task.isCancelled else { return }
            self?.idleTimerFired(generation, terminate: false)
            try? await Task.sleep(for: terminateAfter - suspendAfter)
            guard !Task.isCancelled else { return }
            self?.idleTimerFired(generation, terminate: true)
        }
    }

    /// Ends the current idle period (a connection starts, or the process ends): its timers, even
    /// one already firing, do nothing.
    private func stopIdleClock(_ state: inout State) {
        state.idleGeneration &+= 1
        state.idleTask?.cancel()
        state.idleTask = nil
    }

    private func idleTimerFired(_ generation: UInt64, terminate: Bool) {
        state.withLock { state in
            guard generation == state.idleGeneration, state.slots.isEmpty else { return }
            if terminate {
                beginEnd(&state)
            } else if state.phase == .running {
                state.phase = .suspended
                _ = queueTransition(&state) { [weak self, sandbox] in
                    do {
                        try await sandbox.suspend()
                        self?.emit(.suspended)
                        return true
                    } catch {
                        return false
                    }
                }
            }
        }
    }

    /// Ends the process on purpose: GOODBYE on the control socket (so the extension can exit 0),
    /// continued first if suspended (a stopped process reads nothing), SIGKILL after the grace.
    private func beginEnd(_ state: inout State) {
        guard state.phase == .running || state.phase == .suspended else { return }
        let wasSuspended = state.phase == .suspended
        state.phase = .ending
        state.endExpected = true
        stopIdleClock(&state)
        if let control = state.control { try? control.enqueue(.goodbye) }
        let sandbox = sandbox, grace = Self.goodbyeGrace
        _ = queueTransition(&state) {
            if wasSuspended { _ = try? await sandbox.resume() }
            try? await Task.sleep(for: grace)
            sandbox.kill()
            return true
        }
    }

    /// Its init did not carry out a SIGCONT: the sandbox is not used again. Most often the init
    /// is dying (killed from outside: its control socket closes a moment before the host can
    /// reap it, and longer before the end is reported): that end is the sandbox's own, an
    /// interruption reported with its reason, never taken for an end the host asked for. An init
    /// that refused while the sandbox lives is killed, on purpose.
    private func sandboxUnresponsive() {
        let kill = state.withLock { state -> Bool in
            guard state.phase == .running || state.phase == .suspended else { return false }
            if sandbox.programLiveness() == .ending {
                becameUnusable(&state)
                return false
            }
            state.phase = .ending
            state.endExpected = true
            stopIdleClock(&state)
            return true
        }
        if kill { sandbox.kill() }
    }

    /// Queues `work` after every transition decided before it; returns its task.
    private func queueTransition(_ state: inout State, _ work: @escaping @Sendable () async -> Bool) -> Task<Bool, Never> {
        let previous = state.transitions
        let task = Task {
            _ = await previous?.value
            return await work()
        }
        state.transitions = task
        return task
    }

    // MARK: The control socket and the end

    /// The extension's frames on its control socket after READY: only GOODBYE (it is exiting of
    /// its own accord: an orderly end, not an interruption). Anything else breaks the protocol
    /// and the socket is no longer read.
    private func controlReadable() {
        state.withLock { state in
            guard state.controlToken != nil else { return }  // `ended` is removing the registration
            // On the monitor thread, removing our own registration does not wait (see
            // `EventMonitor.remove`): done under the lock, before anyone can close the socket.
            if let watch = readControl(&state) {
                Supervisor.shared.monitor.remove(fd: watch.fd, token: watch.token)
                becameUnusable(&state)
            }
        }
    }

    /// The control socket hung up or broke the protocol, or the init is dying: no connection can
    /// reach the extension any more, so the process is ending, and `makeConnection` (or a new
    /// handle) launches a fresh one rather than fail on this one. A program that is dying gets up
    /// to `endAfterHangUpLimit` to end by itself (its own reason is reported); one that closed its
    /// control socket on purpose is killed after the grace. Either way its end is an
    /// interruption: the host did not ask for it.
    private func becameUnusable(_ state: inout State) {
        guard state.phase == .running || state.phase == .suspended else { return }
        state.phase = .ending
        stopIdleClock(&state)
        let sandbox = sandbox
        _ = queueTransition(&state) {
            try? await Task.sleep(for: Self.waitForEndAfterHangUp(sandbox.programLiveness()))
            sandbox.kill()
            return true
        }
    }

    /// Reads the frames that wait. Returns the control socket's registration when it is no longer
    /// to be read (taken out of `state`): the caller removes it from the monitor.
    private func readControl(_ state: inout State) -> ControlWatch? {
        guard let control = state.control else { return nil }
        while true {
            let result: FrameSocket.ReceiveResult
            do { result = try control.tryReceive() } catch {
                return stopWatchingControl(&state)
            }
            switch result {
            case .wouldBlock:
                return nil
            case .closed:
                return stopWatchingControl(&state)
            case .frame(let frame):
                UntrustedDescriptors.close(frame.fds)
                guard frame.kind == .goodbye else {
                    return stopWatchingControl(&state)
                }
                if state.phase == .running || state.phase == .suspended {
                    state.phase = .ending
                    state.endExpected = true
                    stopIdleClock(&state)
                    let sandbox = sandbox, grace = Self.goodbyeGrace
                    _ = queueTransition(&state) {
                        try? await Task.sleep(for: grace)
                        sandbox.kill()
                        return true
                    }
                }
            }
        }
    }

    /// The control socket's registration with the monitor.
    private struct ControlWatch { let fd: FileDescriptor; let token: UInt64 }

    /// Takes the control socket's registration out of `state`. The caller removes it from the
    /// monitor, off the lock unless on the monitor thread: `remove` waits for a running handler,
    /// and ours takes the lock.
    private func stopWatchingControl(_ state: inout State) -> ControlWatch? {
        guard let token = state.controlToken.take(), let fd = state.control?.descriptor else { return nil }
        return ControlWatch(fd: fd, token: token)
    }

    /// Each attached handle's `onEvent`.
    private func emit(_ event: AppExtensionLifecycleEvent) {
        logger.debug("extension \(event)")
        let handlers = state.withLock { $0.handles.values.compactMap(\.onEvent) }
        for handler in handlers { handler(event) }
    }

    /// An end the host asked for (or the extension announced with its GOODBYE) is `terminated`
    /// only when the program exited 0 or was killed after the grace. Any other end in that window
    /// (a crash, a seccomp violation, a limit, a failure status) is an interruption with its
    /// reason: the idle timer may fire just after a crash the host has not heard of yet, and a
    /// program that crashes while it exits has a bug its host should hear about.
    private func ended(_ termination: Termination) async {
        var established = 0
        let (expected, handles, live, watch) = state.withLock { state -> (Bool, [HandleEntry], [ExtensionConnection], ControlWatch?) in
            // A GOODBYE written just before the exit may not have been read yet.
            var watch = state.controlToken != nil ? readControl(&state) : nil
            state.phase = .ended
            stopIdleClock(&state)
            watch = watch ?? stopWatchingControl(&state)
            let live = state.slots.values.compactMap(\.connection.connection)
            established = state.slots.values.filter(\.established).count
            state.slots.removeAll()
            for id in state.handles.keys { state.handles[id]?.connections.removeAll() }
            return (state.endExpected && termination.isOrderlyEnd, Array(state.handles.values), live, watch)
        }
        // Off the lock (a running handler of the control socket waits for it), and before the
        // socket closes: its fd number must not be reused while still registered.
        if let watch { Supervisor.shared.monitor.remove(fd: watch.fd, token: watch.token) }
        state.withLock { state in
            state.control?.close()
            state.control = nil
        }
        await ExtensionRegistry.shared.ended(self)
        if established > 0 { Telemetry.openConnections.decrement(by: Double(established)) }
        if expected {
            Telemetry.terminations.increment()
            logger.info("extension terminated", metadata: ["exit": "\(termination)"])
            for handle in handles { handle.onEvent?(.terminated) }
            for connection in live { connection.close(because: .connectionClosed(detail: "the extension process ended")) }
            return
        }
        Telemetry.interrupted(termination, logger: logger, metadata: [:])
        // Pending requests fail once (with the reason), then each handle hears it once.
        for connection in live { connection.interrupt(termination) }
        for handle in handles { handle.onEvent?(.interrupted(termination)) }
        for handle in handles { handle.onInterruption(termination) }
    }
}

extension Termination {
    /// How a program ends when asked to (GOODBYE, then SIGKILL after the grace).
    fileprivate var isOrderlyEnd: Bool {
        switch self {
        case .exited(code: 0), .killed: return true
        default: return false
        }
    }
}
