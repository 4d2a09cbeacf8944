import ExtSandboxWire
import FoundationEssentials
import Glibc
import Logging
import SandboxPolicy
import SandboxRuntime
import SandboxSystem
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
/// ```swift
/// let process = try await AppExtensionProcess(configuration: .init(appExtensionIdentity: identity))
/// let connection = try await process.makeConnection()            // makeXPCConnection()
/// let filter = try connection.remoteObject($TextFilter.self)       // the typed proxy
/// let result = try await filter.apply("hello", options: .init())
/// ```
///
/// (Below the proxy, ``ExtensionConnection/send(_:)`` sends messages in bytes, for extensions
/// that speak no contract.)
///
/// Creating one reuses the running process of that extension for this host (same identity,
/// executable file and resolved policy), or launches one into its sandbox and returns once the
/// extension is ready to accept connections. The launch is warm, in a sandbox built in advance,
/// when the host keeps some for the identity (``prepareWarmLaunches(of:count:)``).
///
/// Lifecycle (ExtensionFoundation's): the process lives while connections are open. With none
/// (also right after launch, if nobody connects) it is suspended (SIGSTOP of every process in
/// its sandbox) after ``Configuration/suspendAfter`` and ended after
/// ``Configuration/terminateAfter``: GOODBYE on its control socket, and SIGKILL if it has not
/// exited after a grace of half a second. With no handle and no connection it is ended at once.
/// ``invalidate()`` (or releasing the last reference to the handle) invalidates this handle's
/// connections only; other handles' keep the process. If it ends unexpectedly, every pending
/// request fails once and each attached handle's ``Configuration/onInterruption`` runs exactly
/// once, with the reason; a later ``makeConnection(handlers:)`` launches a fresh process.
///
/// Differences from ExtensionFoundation: proxies are distributed actors typed by a `@Resolvable`
/// protocol (``ExtensionConnection/remoteObject(_:)``) rather than XPC proxies, connections also
/// carry byte messages, and processes are shared per host *process*.
public final class AppExtensionProcess: Sendable {
    public struct Configuration: Sendable {
        public var identity: AppExtensionIdentity
        /// Runs exactly once for this handle when its process ends unexpectedly (each handle
        /// attached to the process has its own).
        public var onInterruption: @Sendable (Termination) -> Void
        /// This handle's lifecycle events (launched or reused, suspended, resumed, terminated,
        /// interrupted), while it is attached: from its creation until ``invalidate()``.
        public var onEvent: (@Sendable (AppExtensionLifecycleEvent) -> Void)?
        /// How long a process with no connection keeps running before it is suspended. A
        /// property of the process: the launching handle's value counts, a handle that reuses a
        /// running process does not change it.
        public var suspendAfter: Duration
        /// How long a process with no connection lives at all (a property of the process, like
        /// ``suspendAfter``).
        public var terminateAfter: Duration
        /// How long launch and connection handshakes may take.
        public var readyTimeout: Duration
        /// Bounds of each connection's send queue (this handle's connections).
        public var sendQueueLimit: ExtensionConnection.SendQueueLimit
        /// Where the process's lifecycle and security events are logged, with structured
        /// metadata (identifier, point, policy, pid, reason, syscall). A property of the process,
        /// like the timers: the launching handle's. By default nothing is logged (swift-log's
        /// default backend would print on standard output, which may be the host's data): pass a
        /// logger of the host's, e.g. `Logger(label: "org.extsandbox.host")` after
        /// `LoggingSystem.bootstrap`.
        public var logger: Logger
        /// Where the extension's standard output and standard error go: discarded unless the
        /// host passes a descriptor (``ExtensionOutput``). A property of the process, like the
        /// timers: the launching handle's.
        public var output: ExtensionOutput

        public init(
            identity: AppExtensionIdentity, onInterruption: @escaping @Sendable (Termination) -> Void = { _ in },
            onEvent: (@Sendable (AppExtensionLifecycleEvent) -> Void)? = nil,
            suspendAfter: Duration = .milliseconds(250), terminateAfter: Duration = .seconds(30),
            readyTimeout: Duration = .seconds(10), sendQueueLimit: ExtensionConnection.SendQueueLimit = .init(),
            logger: Logger = Logger(label: "org.extsandbox.host", factory: { _ in SwiftLogNoOpLogHandler() }),
            output: ExtensionOutput = .discard
        ) {
            self.logger = logger
            self.output = output
            self.sendQueueLimit = sendQueueLimit
            self.identity = identity
            self.onInterruption = onInterruption
            self.onEvent = onEvent
            self.suspendAfter = suspendAfter
            self.terminateAfter = terminateAfter
            self.readyTimeout = readyTimeout
        }

        /// ExtensionFoundation's initializer: `onInterruption` runs exactly once for this handle
        /// when its process ends unexpectedly, without the reason (the other initializer passes
        /// it); everything else has its default.
        public init(appExtensionIdentity: AppExtensionIdentity, onInterruption: @escaping @Sendable () -> Void = {}) {
            self.init(identity: appExtensionIdentity, onInterruption: { _ in onInterruption() })
        }

        /// ExtensionFoundation's initializer with our interruption handler, which is told why the
        /// process ended.
        public init(appExtensionIdentity: AppExtensionIdentity, onInterruption: @escaping @Sendable (Termination) -> Void) {
            self.init(identity: appExtensionIdentity, onInterruption: onInterruption)
        }

        /// ExtensionFoundation's name for ``identity``.
        public var appExtensionIdentity: AppExtensionIdentity {
            get { identity }
            set { identity = newValue }
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
    ///
    /// Every way it fails is an ``ExtensionError``: a launch that discovery refuses (not
    /// discovered, not approved, changed…) as ``ExtensionError/discovery(_:)``.
    public init(configuration: Configuration) async throws(ExtensionError) {
        self.configuration = configuration
        // A forged identity must not even share a running process (LaunchAuthorization.swift).
        try LaunchAuthorization.checkProvenance(configuration.identity)
        key = try ProcessReuseKey(identity: configuration.identity)
        let handleID = handleID
        core = Mutex(try await ExtensionRegistry.shared.core(for: configuration, key: key, handle: handleID))
    }

    /// ExtensionFoundation's synchronous initializer: as the asynchronous one (from which a task
    /// calls it), but blocks the calling thread until the extension is ready or its launch failed.
    ///
    /// For synchronous code (a command-line host's `main`, the main thread, a thread of the host's
    /// own). The launch runs in tasks of the cooperative pool meanwhile, which has a thread per
    /// core: called from a task off the main thread (a pool thread, most likely), it throws
    /// ``ExtensionError/blockingLaunchRefused`` rather than block one of them; use
    /// `try await AppExtensionProcess(configuration:)` there.
    public init(configuration: Configuration) throws(ExtensionError) {
        try Self.refuseBlockingInTask()
        self.configuration = configuration
        try LaunchAuthorization.checkProvenance(configuration.identity)
        key = try ProcessReuseKey(identity: configuration.identity)
        let handleID = handleID, key = key
        let outcome = BlockingOutcome<ExtensionProcessCore, ExtensionError>()
        Task.detached {
            do throws(ExtensionError) {
                outcome.finish(.success(try await ExtensionRegistry.shared.core(for: configuration, key: key, handle: handleID)))
            } catch {
                outcome.finish(.failure(error))
            }
        }
        core = Mutex(try outcome.wait())
    }

    /// Releasing the last reference invalidates the handle (and so its connections).
    deinit {
        invalidate()
    }

    /// The sandbox the extension runs in (for diagnostics: pids, suspend state).
    public var sandbox: SandboxedProcess { core.withLock { $0.sandbox } }

    /// Whether the kernel bounds the extension's private container in its current process
    /// (``ContainerBound/notEnforced(reason:)`` says why not: docs/containers.md).
    public var containerBound: ContainerBound { core.withLock { $0.containerBound } }

    /// A new connection to the extension, which may accept or reject it. Resumes a suspended
    /// process; launches a fresh one if the last ended (a process that ends while this call
    /// attaches to it is never handed back: the call launches a fresh one, and an unexpected
    /// end is reported to ``Configuration/onInterruption`` as well).
    ///
    /// `handlers` answer the extension's own requests and one-way messages on this connection
    /// (without them its requests get ERROR 2 and its one-way messages are dropped).
    ///
    /// The counterpart of ExtensionFoundation's `makeXPCConnection()`; its proxy comes from
    /// ``ExtensionConnection/remoteObject(_:)`` instead of `remoteObjectProxyWithErrorHandler`:
    ///
    /// ```swift
    /// let connection = try await process.makeConnection()       // makeXPCConnection()
    /// let proxy = try connection.remoteObject($MyRemoteInterface.self)
    /// ```
    public func makeConnection(handlers: ExtensionConnection.Handlers = .init()) async throws(ExtensionError) -> ExtensionConnection {
        // A process that ends at once every time is not retried forever.
        for _ in 0..<3 {
            guard !invalidated.load(ordering: .relaxed) else { throw .invalidated }
            let current = core.withLock { $0 }
            switch try await current.connect(handle: handleID, timeout: configuration.readyTimeout, sendQueueLimit: configuration.sendQueueLimit, handlers: handlers) {
            case .connected(let connection):
                return connection
            case .processEnded:
                // This handle stays on the old process's list until it has ended, so that it
                // hears how (terminated, or interrupted with the reason).
                let fresh = try await ExtensionRegistry.shared.core(for: configuration, key: key, handle: handleID)
                core.withLock { $0 = fresh }
                // Invalidated meanwhile: the fresh process must not keep this handle.
                if invalidated.load(ordering: .relaxed) { fresh.detach(handle: handleID) }
            }
        }
        throw .connectionClosed(detail: "the extension process ended each time a connection was being made")
    }

    /// Gives up this handle: its connections are invalidated (other handles' stay open) and no
    /// new connection is made through it. The process ends (GOODBYE, then SIGKILL after a short
    /// grace) when no handle and no connection holds it any more.
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
    /// Each launch's outcome as a `Result`: a task's thrown error would lose its type.
    private var launching: [String: [(key: ProcessReuseKey, task: Task<Result<ExtensionProcessCore, ExtensionError>, Never>)]] = [:]

    /// A running process for `key` with `handle` attached (``AppExtensionLifecycleEvent/reused``),
    /// or a new one launched for it (``AppExtensionLifecycleEvent/launched(pid:)``). A process
    /// that is ending is never attached to.
    func core(for configuration: AppExtensionProcess.Configuration, key: ProcessReuseKey, handle: UUID) async throws(ExtensionError) -> ExtensionProcessCore {
        let identifier = key.identity.bundleIdentifier
        for core in running[identifier] ?? [] where core.key == key {
            if core.attach(handle: handle, configuration: configuration) { return core }
        }
        // Another handle is launching the same: share its launch.
        if let task = launching[identifier]?.first(where: { $0.key == key })?.task {
            let core = try await task.value.get()
            if core.attach(handle: handle, configuration: configuration) { return core }
        }
        let task = Task { () async -> Result<ExtensionProcessCore, ExtensionError> in
            do throws(ExtensionError) {
                return .success(try await ExtensionProcessCore.launch(configuration, key: key, handle: handle))
            } catch {
                return .failure(error)
            }
        }
        launching[identifier, default: []].append((key, task))
        defer {
            launching[identifier]?.removeAll { $0.key == key }
            if launching[identifier]?.isEmpty == true { launching[identifier] = nil }
        }
        let core = try await task.value.get()
        running[identifier, default: []].append(core)
        core.start()
        return core
    }

    func ended(_ core: ExtensionProcessCore) {
        let identifier = core.key.identity.bundleIdentifier
        running[identifier]?.removeAll { $0 === core }
        if running[identifier]?.isEmpty == true { running[identifier] = nil }
    }
}

extension ExtensionProcessCore {
    /// Launches the extension in the sandbox of its point's security level and waits for READY.
    /// The sandbox gets exactly `key.policy`, the policy the reuse key was made with; `handle`
    /// (the launching one) is attached. The caller calls ``start()``.
    static func launch(_ configuration: AppExtensionProcess.Configuration, key: ProcessReuseKey, handle: UUID) async throws(ExtensionError) -> ExtensionProcessCore {
        let identity = key.identity
        let policy = key.policy
        // Discovered identities are checked again now (installed, unchanged, approved, enabled,
        // in scope): LaunchAuthorization.swift.
        let authorization: LaunchAuthorization
        do throws(ExtensionError) {
            authorization = try LaunchAuthorization.authorize(identity)
        } catch {
            // No longer launchable (revoked, disabled, removed, changed): nothing stays built for it.
            await WarmLaunches.shared.drain(refused: identity)
            throw error
        }
        let hostIdentity: HostIdentity
        do throws(SandboxError) {
            hostIdentity = try HostIdentity.forCaller()
        } catch {
            throw .launch(error, securityLevel: identity.point.securityLevel)
        }
        // The containers' hold is released when the sandbox has ended (or the launch failed).
        let containers: ContainerGrant
        do throws(DiscoveryError) {
            containers = try ContainerGrant.make(for: identity, host: hostIdentity)
        } catch {
            throw .discovery(error)
        }
        if case .notEnforced(let reason) = containers.bound {
            configuration.logger.warning("the extension's container is not bounded", metadata: ["identifier": "\(identity.bundleIdentifier)", "reason": "\(reason)"])
        }
        let (hostFD, extensionFD): (FileDescriptor, FileDescriptor)
        do throws(WireError) {
            (hostFD, extensionFD) = try FrameSocket.makeSocketPair()
        } catch {
            containers.ended()
            throw .protocolError(error)
        }
        let sandboxConfiguration = authorization.sandboxConfiguration(
            identity: identity, policy: policy, containers: containers, output: configuration.output.stream, extensionFD: extensionFD)
        let sandbox: SandboxedProcess
        do throws(SandboxError) {
            sandbox = try await Supervisor.shared.launch(sandboxConfiguration)
        } catch {
            hostFD.close()
            extensionFD.close()
            containers.ended()
            throw .launch(error, securityLevel: identity.point.securityLevel)
        }
        extensionFD.close()
        containers.launched()
        sandbox.whenEnded { _ in containers.ended() }
        func abandon(_ error: ExtensionError) async -> ExtensionError {
            sandbox.kill()
            _ = await sandbox.waitForExit()
            return error
        }
        let control: FrameSocket
        do throws(ExtensionError) {
            control = try await waitForReady(control: FrameSocket(descriptor: hostFD, untrustedPeer: true), sandbox: sandbox,
                                             timeout: configuration.readyTimeout, identifier: identity.bundleIdentifier)
        } catch {
            throw await abandon(error)  // the control socket is closed already
        }
        let core = ExtensionProcessCore(key: key, sandbox: sandbox, control: control, configuration: configuration, handle: handle,
                                        containerBound: containers.bound)
        configuration.onEvent?(.launched(pid: sandbox.pid))
        SpareSocketPair.prepare()  // for its first connection
        return core
    }

    /// READY on the control socket, or the process's end, or the timeout: whichever comes first.
    /// The READY must carry `identifier`: the one the extension was launched as. Returns the
    /// control socket once READY came; otherwise it is closed.
    private static func waitForReady(control: sending FrameSocket, sandbox: SandboxedProcess, timeout: Duration,
                                     identifier: String) async throws(ExtensionError) -> sending FrameSocket {
        enum Outcome: Sendable { case ready, ended(Termination), timedOut, closed, broken(WireError), mismatch(String) }
        let started = ContinuousClock.now
        let once = OnceContinuation<Outcome>()
        let monitor = Supervisor.shared.monitor
        do throws(WireError) {
            try control.setNonBlocking(true)
        } catch {
            throw .protocolError(error)
        }
        guard let descriptor = control.descriptor else { throw .connectionClosed(detail: "the control socket is closed") }
        // The monitor thread reads the socket until the outcome; it is ours again once the
        // registration is removed.
        let reader = ControlUntilReady(control)
        let token: UInt64
        do throws(EventMonitor.Failure) {
            token = try monitor.add(fd: descriptor, events: EventMonitor.readable) { _ in
                reader.socket.withLock { socket in
                    guard let socket else { return }
                    while true {
                        do throws(WireError) {
                            switch try socket.tryReceive() {
                            case .wouldBlock: return
                            case .closed: once.resume(.closed); return
                            case .frame(let frame):
                                UntrustedDescriptors.close(frame.fds)
                                guard frame.kind == .ready else {
                                    once.resume(.broken(.unexpectedFrame(kind: frame.kind, reason: "the launch expects READY")))
                                    return
                                }
                                let said = String(decoding: frame.payload, as: UTF8.self)
                                once.resume(said == identifier ? .ready : .mismatch(said))
                                return
                            }
                        } catch .connectionClosed {
                            once.resume(.closed)
                            return
                        } catch {
                            once.resume(.broken(error))
                            return
                        }
                    }
                }
            }
        } catch {
            // The caller kills the sandbox; the control socket closes with `reader`.
            throw .monitorFailed(SandboxError(error))
        }
        // A closure, not a task: a task waiting for the exit would stay suspended (its memory
        // held) for the extension's whole life, since nothing cancels that wait.
        sandbox.whenEnded { once.resume(.ended($0)) }
        let timer = Task { try? await Task.sleep(for: timeout); once.resume(.timedOut) }
        let outcome = await once.value
        timer.cancel()
        // Returns once the handler is not running (and it never runs again).
        monitor.remove(fd: descriptor, token: token)
        let control = reader.take()
        switch outcome {
        case .ready:
            guard let control else { throw .connectionClosed(detail: "the control socket is gone") }  // (taken once: never)
            return control
        case .ended(let termination): throw .endedBeforeReady(termination)
        case .timedOut: throw .notReadyInTime
        case .closed:
            // An extension that dies closes its control socket a moment before its exit is known:
            // its end, if it comes at once, is the reason (killed, crashed), not the socket.
            let exit = OnceContinuation<Termination?>()
            sandbox.whenEnded { exit.resume($0) }  // a closure, as above: no task left waiting
            let grace = Task { [wait = ExtensionProcessCore.waitForEndAfterHangUp(sandbox.programLiveness(), bound: timeout - (ContinuousClock.now - started))] in
                try? await Task.sleep(for: wait)
                exit.resume(nil)
            }
            let termination = await exit.value
            grace.cancel()
            if let termination { throw .endedBeforeReady(termination) }
            throw .connectionClosed(detail: "the extension closed its control socket before it was ready")
        case .broken(let error): throw .protocolError(error)
        case .mismatch(let said): throw .discovery(.identifierMismatch(expected: identifier, actual: said))
        }
    }
}

/// The control socket while the monitor thread reads it for READY (`waitForReady`); taken back
/// by the launch once the registration is removed.
private final class ControlUntilReady: Sendable {
    let socket: Mutex<FrameSocket?>

    init(_ socket: sending FrameSocket) {
        self.socket = Mutex(socket)
    }

    func take() -> sending FrameSocket? {
        socket.withLock { $0.take() }
    }
}
