import ExtSandboxWire
import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import Synchronization

/// What happened to an extension process, for hosts that show or log its lifecycle.
public enum AppExtensionLifecycleEvent: Sendable, Equatable {
    /// A new sandbox was launched (the pid of its init, in the host's PID namespace).
    case launched(pid: pid_t)
    /// A running process was reused for a new handle.
    case reused
    /// No connection was open: every process of the sandbox is stopped.
    case suspended
    /// A connection is being made: the sandbox runs again.
    case resumed
    /// Idle (or no longer wanted) and ended by the host.
    case terminated
    /// Ended unexpectedly, with the reason.
    case interrupted(Termination)
}

/// An extension's process, sandboxed, as the host sees it (ExtensionFoundation's
/// `AppExtensionProcess`).
///
/// Creating one reuses the running process of that extension for this host, or launches one
/// into its sandbox and returns once the extension is ready to accept connections. The
/// process lives while connections are open; with none it is suspended (SIGSTOP of every
/// process in its sandbox) after ``Configuration/suspendAfter``, and terminated after
/// ``Configuration/terminateAfter``. If it ends unexpectedly, every pending request fails once
/// and ``Configuration/onInterruption`` runs exactly once, with the reason; a later
/// ``makeConnection()`` launches a fresh process.
///
/// Differences from ExtensionFoundation: connections carry byte messages (with Codable
/// conveniences) rather than XPC proxies, and processes are shared per host *process*.
public final class AppExtensionProcess: Sendable {
    public struct Configuration: Sendable {
        public var identity: AppExtensionIdentity
        /// Runs exactly once per handle when its process ends unexpectedly.
        public var onInterruption: @Sendable (Termination) -> Void
        /// Lifecycle events (launched, suspended, resumed, terminated, interrupted).
        public var onEvent: (@Sendable (AppExtensionLifecycleEvent) -> Void)?
        /// How long a process with no connection keeps running before it is suspended.
        public var suspendAfter: Duration
        /// How long a process with no connection lives at all.
        public var terminateAfter: Duration
        /// How long launch and connection handshakes may take.
        public var readyTimeout: Duration

        public init(
            identity: AppExtensionIdentity, onInterruption: @escaping @Sendable (Termination) -> Void = { _ in },
            onEvent: (@Sendable (AppExtensionLifecycleEvent) -> Void)? = nil,
            suspendAfter: Duration = .milliseconds(250), terminateAfter: Duration = .seconds(30),
            readyTimeout: Duration = .seconds(10)
        ) {
            self.identity = identity
            self.onInterruption = onInterruption
            self.onEvent = onEvent
            self.suspendAfter = suspendAfter
            self.terminateAfter = terminateAfter
            self.readyTimeout = readyTimeout
        }
    }

    public let configuration: Configuration
    private let handleID = UUID()
    private let core: Mutex<ExtensionProcessCore>
    private let invalidated = Atomic<Bool>(false)
    /// What a process must match to be shared with this handle (resolved once, at creation).
    private let key: ProcessReuseKey

    /// Reuses the extension's running process or launches it; returns once it is ready.
    ///
    /// A running process is reused only when its identity, its executable file and its resolved
    /// policy are all this handle's (see `ProcessReuseKey`); otherwise this handle gets a new
    /// process under its own policy, which coexists with the other.
    public init(configuration: Configuration) async throws {
        self.configuration = configuration
        key = try ProcessReuseKey(identity: configuration.identity)
        let core = try await ExtensionRegistry.shared.core(for: configuration, key: key)
        self.core = Mutex(core)
        core.attach(handle: handleID, configuration: configuration)
    }

    deinit {
        invalidate()
    }

    /// The sandbox the extension runs in (for diagnostics: pids, suspend state).
    public var sandbox: SandboxedProcess { core.withLock { $0.sandbox } }

    /// A new connection to the extension, which may accept or reject it. Resumes a suspended
    /// process; launches a fresh one if the last ended.
    public func makeConnection() async throws -> ExtensionConnection {
        guard !invalidated.load(ordering: .relaxed) else { throw ExtensionError.invalidated }
        var current = core.withLock { $0 }
        if current.hasEnded {
            current.detach(handle: handleID)
            current = try await ExtensionRegistry.shared.core(for: configuration, key: key)
            current.attach(handle: handleID, configuration: configuration)
            core.withLock { $0 = current }
        }
        return try await current.connect(timeout: configuration.readyTimeout)
    }

    /// Gives up this handle: no new connections through it. The process ends when no handle
    /// and no connection holds it any more.
    public func invalidate() {
        guard !invalidated.exchange(true, ordering: .relaxed) else { return }
        core.withLock { $0 }.detach(handle: handleID)
    }
}

/// Running extension processes of this host: one per reuse key (identity, executable file,
/// resolved policy), so several may run under one identifier.
actor ExtensionRegistry {
    static let shared = ExtensionRegistry()

    private var running: [String: [ExtensionProcessCore]] = [:]
    private var launching: [String: [(key: ProcessReuseKey, task: Task<ExtensionProcessCore, any Error>)]] = [:]

    func core(for configuration: AppExtensionProcess.Configuration, key: ProcessReuseKey) async throws -> ExtensionProcessCore {
        let identifier = key.identity.bundleIdentifier
        if let core = running[identifier]?.first(where: { $0.key == key && !$0.hasEnded }) {
            configuration.onEvent?(.reused)
            return core
        }
        if let task = launching[identifier]?.first(where: { $0.key == key })?.task { return try await task.value }
        let task = Task { try await ExtensionProcessCore.launch(configuration, key: key) }
        launching[identifier, default: []].append((key, task))
        defer {
            launching[identifier]?.removeAll { $0.key == key }
            if launching[identifier]?.isEmpty == true { launching[identifier] = nil }
        }
        let core = try await task.value
        running[identifier, default: []].append(core)
        return core
    }

    func ended(_ core: ExtensionProcessCore) {
        let identifier = core.key.identity.bundleIdentifier
        running[identifier]?.removeAll { $0 === core }
        if running[identifier]?.isEmpty == true { running[identifier] = nil }
    }
}

/// The process behind every handle of one extension: lifecycle and connections.
final class ExtensionProcessCore: Sendable {
    let key: ProcessReuseKey
    var identity: AppExtensionIdentity { key.identity }
    let sandbox: SandboxedProcess

    private struct State {
        var control: FrameSocket?
        var handles: [UUID: AppExtensionProcess.Configuration] = [:]
        var connections = 0
        var nextConnectionID: UInt64 = 1
        var live: [UInt64: WeakConnection] = [:]
        var suspended = false
        var idleTask: Task<Void, Never>?
        var ended = false
        var endExpected = false
        /// A socket pair made ahead for the next connection (see ``connect(timeout:)``).
        var spare: (host: Int32, extension: Int32)?
    }

    private struct WeakConnection: @unchecked Sendable {
        weak var connection: ExtensionConnection?
    }

    private let state: Mutex<State>
    private let settings: AppExtensionProcess.Configuration

    private init(key: ProcessReuseKey, sandbox: SandboxedProcess, control: sending FrameSocket, settings: AppExtensionProcess.Configuration) {
        self.key = key
        self.sandbox = sandbox
        self.settings = settings
        state = Mutex(State(control: control))
    }

    /// Ended, or being ended on purpose (killed, not yet reaped): not to be handed out again.
    var hasEnded: Bool { state.withLock { $0.ended || $0.endExpected } }

    /// Launches the extension in the sandbox of its point's security level and waits for READY.
    /// The sandbox gets exactly `key.policy`, the policy the reuse key was made with.
    static func launch(_ configuration: AppExtensionProcess.Configuration, key: ProcessReuseKey) async throws -> ExtensionProcessCore {
        let identity = key.identity
        let policy = key.policy
        let (hostFD, extensionFD) = try FrameSocket.makeSocketPair()
        let sandboxConfiguration = SandboxConfiguration(
            executable: identity.executablePath, arguments: [identity.executablePath] + identity.arguments,
            environment: SandboxEnvironment.compose(policy: policy, caller: ProcessInfo.processInfo.environment),
            policy: policy, standardInput: .null, standardOutput: .inherit, standardError: .inherit,
            extraFileDescriptors: [extensionFD])
        let sandbox: SandboxedProcess
        do {
            sandbox = try await Supervisor.shared.launch(sandboxConfiguration)
        } catch {
            close(hostFD)
            close(extensionFD)
            throw ExtensionError.launchFailed("\(error)")
        }
        close(extensionFD)
        let control = FrameSocket(descriptor: hostFD)
        do {
            try await waitForReady(control: control, sandbox: sandbox, timeout: configuration.readyTimeout)
        } catch {
            control.close()
            sandbox.kill()
            _ = await sandbox.waitForExit()
            throw error
        }
        let core = ExtensionProcessCore(key: key, sandbox: sandbox, control: control, settings: configuration)
        configuration.onEvent?(.launched(pid: sandbox.pid))
        Task.detached { [core] in
            let termination = await sandbox.waitForExit()
            await core.ended(termination)
        }
        return core
    }

    /// READY on the control socket, or the process's end, or the timeout: whichever comes first.
    private static func waitForReady(control: FrameSocket, sandbox: SandboxedProcess, timeout: Duration) async throws {
        enum Outcome: Sendable { case ready, ended(Termination), timedOut, broken(String) }
        let once = OnceContinuation<Outcome>()
        let monitor = Supervisor.shared.monitor
        try control.setNonBlocking(true)
        let reader = UncheckedBox(control)
        let token = try monitor.add(fd: control.descriptor, events: EventMonitor.readable) { _ in
            while true {
                do {
                    switch try reader.value.tryReceive() {
                    case .wouldBlock: return
                    case .closed: once.resume(.broken("the extension closed its control socket")); return
                    case .frame(let frame):
                        frame.closeFDs()
                        if frame.kind == .ready { once.resume(.ready) } else { once.resume(.broken("expected READY, got \(frame.kind)")) }
                        return
                    }
                } catch {
                    once.resume(.broken("\(error)"))
                    return
                }
            }
        }
        let watchers = [
            Task { once.resume(.ended(await sandbox.waitForExit())) },
            Task { try? await Task.sleep(for: timeout); once.resume(.timedOut) },
        ]
        let outcome = await once.value
        watchers.forEach { $0.cancel() }
        monitor.remove(fd: control.descriptor, token: token)
        switch outcome {
        case .ready: return
        case .ended(let termination): throw ExtensionError.endedBeforeReady(termination)
        case .timedOut: throw ExtensionError.notReadyInTime
        case .broken(let why): throw ExtensionError.launchFailed(why)
        }
    }

    func attach(handle: UUID, configuration: AppExtensionProcess.Configuration) {
        state.withLock { $0.handles[handle] = configuration }
    }

    func detach(handle: UUID) {
        let terminate = state.withLock { state -> Bool in
            state.handles[handle] = nil
            return state.handles.isEmpty && state.connections == 0 && !state.ended
        }
        if terminate { self.terminate() }
    }

    /// A new connection: resume if suspended, hand the extension its socket, shake hands.
    func connect(timeout: Duration) async throws -> ExtensionConnection {
        let (wasSuspended, connectionID) = state.withLock { state -> (Bool, UInt64) in
            state.idleTask?.cancel()
            state.idleTask = nil
            state.connections += 1  // counted now, so that nothing suspends it meanwhile
            defer { state.nextConnectionID += 1 }
            let suspended = state.suspended
            state.suspended = false
            return (suspended, state.nextConnectionID)
        }
        var handedOver = false
        do {
            if wasSuspended {
                do {
                    try await sandbox.resume()
                } catch {
                    // Still stopped: the next connection must try the resume again.
                    state.withLock { $0.suspended = true }
                    throw error
                }
                settings.onEvent?(.resumed)
            }
            let (hostFD, extensionFD) = try state.withLock { $0.spare.take() } ?? FrameSocket.makeSocketPair()
            // The host's HELLO goes into the socket before the extension has its end: it finds
            // the HELLO there as soon as it takes the connection.
            let connection = ExtensionConnection(
                descriptor: hostFD, monitor: Supervisor.shared.monitor, name: identity.bundleIdentifier
            ) { [weak self] in self?.connectionClosed(connectionID) }
            // From here on the connection's own close reports it (once).
            handedOver = true
            let sent: ExtensionError? = state.withLock { state in
                guard let control = state.control, !state.ended else {
                    close(extensionFD)
                    return .connectionClosed(detail: "the extension has ended")
                }
                // Its HELLO could not be written: it has closed (and reported it) already.
                // (The connection never takes this lock while holding its own.)
                guard connection.isOpen else {
                    close(extensionFD)
                    return .connectionClosed(detail: "the HELLO could not be written")
                }
                // An interruption from now on fails the handshake with its reason.
                state.live[connectionID] = WeakConnection(connection: connection)
                do {
                    // enqueue takes the fd; a control socket that does not drain means an
                    // extension that does not accept: refuse rather than block the host.
                    try control.enqueue(.connect(id: connectionID, descriptor: extensionFD))
                    if control.hasPendingOutput { return .connectionClosed(detail: "the extension is not accepting connections") }
                    return nil
                } catch {
                    return .connectionClosed(detail: "\(error)")
                }
            }
            if let sent {
                connection.close(because: sent)
                throw sent
            }
            // While the extension takes the connection, make the socket pair for the next one:
            // a socketpair costs about a sixth of a connection's set-up, here it costs none of it.
            prepareSpareSocketPair()
            try await connection.handshake(timeout: timeout)
            return connection
        } catch {
            // The connection's own close reports itself once it existed.
            if !handedOver { connectionClosed(connectionID) }
            throw error
        }
    }

    private func connectionClosed(_ id: UInt64) {
        state.withLock { state in
            state.live[id] = nil
            state.connections -= 1
            guard state.connections == 0, !state.ended else { return }
            if state.handles.isEmpty {
                state.idleTask = Task { [weak self] in self?.terminate() }
                return
            }
            let suspendAfter = settings.suspendAfter, terminateAfter = settings.terminateAfter
            state.idleTask = Task { [weak self] in
                try? await Task.sleep(for: suspendAfter)
                guard !Task.isCancelled, let self else { return }
                await self.suspendIfIdle()
                try? await Task.sleep(for: terminateAfter - suspendAfter)
                guard !Task.isCancelled else { return }
                self.terminate()
            }
        }
    }

    private func suspendIfIdle() async {
        let idle = state.withLock { state -> Bool in
            guard state.connections == 0, !state.ended, !state.suspended else { return false }
            state.suspended = true
            return true
        }
        guard idle else { return }
        do {
            try await sandbox.suspend()
            settings.onEvent?(.suspended)
        } catch {
            state.withLock { $0.suspended = false }
        }
    }

    /// Makes the spare socket pair unless there is one (or the process has ended). Best effort:
    /// without one, the next connection makes its own.
    private func prepareSpareSocketPair() {
        guard state.withLock({ $0.spare == nil && !$0.ended }), let pair = try? FrameSocket.makeSocketPair() else { return }
        let unused: (Int32, Int32)? = state.withLock { state in
            guard state.spare == nil, !state.ended else { return pair }
            state.spare = (pair.0, pair.1)
            return nil
        }
        if let unused {
            close(unused.0)
            close(unused.1)
        }
    }

    /// Ends the process on purpose (idle, or no longer wanted): not an interruption.
    func terminate() {
        let proceed = state.withLock { state -> Bool in
            guard !state.ended, !state.endExpected else { return false }
            state.endExpected = true
            return true
        }
        if proceed { sandbox.kill() }
    }

    private func ended(_ termination: Termination) async {
        let (expected, handlers, live) = state.withLock { state -> (Bool, [AppExtensionProcess.Configuration], [ExtensionConnection]) in
            state.ended = true
            state.idleTask?.cancel()
            state.control?.close()
            state.control = nil
            if let spare = state.spare.take() {
                close(spare.host)
                close(spare.extension)
            }
            let live = state.live.values.compactMap(\.connection)
            return (state.endExpected, Array(state.handles.values), live)
        }
        await ExtensionRegistry.shared.ended(self)
        if expected {
            settings.onEvent?(.terminated)
            for connection in live { connection.invalidate() }
            return
        }
        // Pending requests fail once (with the reason), then each handle hears it once.
        for connection in live { connection.interrupt(termination) }
        settings.onEvent?(.interrupted(termination))
        for handle in handlers { handle.onInterruption(termination) }
    }
}

/// A continuation resumed by the first of several racing events; later ones are ignored.
final class OnceContinuation<Value: Sendable>: Sendable {
    private let state = Mutex<(value: Value?, waiter: CheckedContinuation<Value, Never>?)>((nil, nil))

    func resume(_ value: Value) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, Never>? in
            guard state.value == nil else { return nil }
            state.value = value
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: value)
    }

    var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Value? in
                    if let value = state.value { return value }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }
}
