import ExtSandboxWire
import FoundationEssentials
import Glibc
import SandboxRuntime
import SandboxSystem
import Synchronization

/// One channel to an extension, made by ``AppExtensionProcess/makeConnection(handlers:)``.
///
/// Call the extension through a proxy typed by the contract both sides share (a `@Resolvable`
/// protocol), as ExtensionFoundation's `NSXPCConnection` gives one from
/// `remoteObjectProxyWithErrorHandler`:
///
/// ```swift
/// let connection = try await process.makeConnection()
/// let filter = try connection.remoteObject($TextFilter.self)
/// let result = try await filter.apply("hello", options: .init())
/// ```
///
/// Each call is a request on this connection: it throws what the remote method threw (a type
/// both sides registered comes back as itself), the connection's failure (the process ended
/// mid-call: ``ExtensionError/interrupted(_:)`` with its reason), or `DistributedCallError`;
/// cancelling the calling task cancels the call. To serve the host's own object to the extension,
/// make the connection with ``AppExtensionProcess/makeConnection(exporting:_:)``.
///
/// The layer below, for extensions that speak no contract: messages in bytes (``send(_:)``,
/// ``sendOneWay(_:)``). A request gets exactly one reply or one error; a cancelled task cancels
/// it. Typed calls ride on these requests (docs/wire-protocol.md §12). The connection keeps its
/// extension process alive until ``invalidate()`` (or until it and its proxies are released).
public final class ExtensionConnection: Sendable {
    // Continuations that throw would lose the error's type: each is resumed with a `Result`.
    typealias Reply = UnsafeContinuation<Result<ExtensionMessage, ExtensionError>, Never>
    typealias Handshake = CheckedContinuation<Result<UInt32, ExtensionError>, Never>
    /// A sender waiting for room: resumed with success to look again, or with its failure.
    typealias RoomWaiter = CheckedContinuation<Result<Void, ExtensionError>, Never>

    /// Everything but sending. The socket is read under this lock (its ``FrameReceiver`` lives
    /// here): by the monitor thread, and by a caller waiting briefly for its reply
    /// (``readReplyBriefly(to:)``).
    struct State {
        /// The socket's receiving direction.
        let receiver: FrameReceiver
        /// Whether the socket is still open (it closes before `closedBecause` is set when the
        /// extension hung up with requests pending: see `eventsArrived`).
        var open = true
        var pending: [UInt64: Reply] = [:]
        /// Requests we cancelled: a late reply to one of them is not a protocol error.
        var cancelled: Set<UInt64> = []
        /// The task waiting for the extension's HELLO (it returns the peer's maximum frame size).
        var handshake: Handshake?
        var closedBecause: ExtensionError?
        /// Caller-thread waits to skip (see ``claimReplyReading(_:to:)``).
        var waitsToSkip = 0
        /// A caller reads its reply on its own thread: the monitor thread does not watch the
        /// socket's readability meanwhile (see ``claimReplyReading(_:to:)``).
        var callerReading = false
        /// ``invalidate()`` has begun: however the socket closes from now on (the extension
        /// closing it on our GOODBYE included), the reason is ``ExtensionError/invalidated``.
        var invalidating = false
        /// The extension's requests being handled, by id (a CANCEL cancels the task).
        var incoming: [UInt64: Task<Void, Never>] = [:]
        /// The last one-way message's handler task: the next one waits for it (in order).
        var lastOneWay: Task<Void, Never>?
        /// One-way messages received whose handler has not returned.
        var oneWaysUnhandled = 0
        /// The socket is not read: the extension's requests and one-way messages being handled
        /// reached ``Handlers/maximumOutstandingMessages``. Its frames wait in the socket, and its
        /// writes block, until one is done.
        var readingPaused = false
    }

    /// Sending. Held while a frame is written, so that frames go out whole and in order, and
    /// never while reading: a sender that the scheduler preempts in `sendmsg` (the extension it
    /// just woke takes its CPU) must not keep the monitor thread from reading the reply.
    struct Output {
        /// The socket's sending direction.
        let sender: FrameSender
        var open = true
        var watchingWritability = false
        /// Senders waiting for room in the send queue (see ``SendQueueLimit``).
        var roomWaiters: [UInt64: RoomWaiter] = [:]
    }

    /// The socket, owned by the connection (closed by ``closeSocket()``). Its receiving direction
    /// lives in `state`, its sending direction in `output`: each is used under its lock only.
    /// `output` is taken before `state`, the lock order everywhere.
    let descriptor: FileDescriptor
    let state: Mutex<State>
    let output: Mutex<Output>
    let token = Atomic<UInt64>(0)
    let nextRequestID = Atomic<UInt64>(1)
    let monitor: EventMonitor
    let onClose: @Sendable () -> Void
    let closeNotified = Atomic<Bool>(false)
    let sendQueueLimit: SendQueueLimit
    let nextRoomWaiter = Atomic<UInt64>(1)
    let handlers: Handlers
    /// The limit on `outstandingIncoming` (``Handlers/maximumOutstandingMessages``, at least 1).
    let maximumOutstandingIncoming: Int
    /// Whether the extension's program is running or ending, asked when it hangs up with
    /// requests pending (see `eventsArrived`).
    let programLiveness: @Sendable () -> ProgramLiveness

    /// Wraps the host end of a new connection and writes the host's HELLO into it at once, so
    /// that the extension finds it waiting when it gets its end (``handshake(timeout:)`` then
    /// waits for the answer). Later, requests are written by their callers, and replies read
    /// on `monitor` (or by a caller waiting briefly for its own).
    init(descriptor: FileDescriptor, monitor: EventMonitor, name: String, sendQueueLimit: SendQueueLimit = SendQueueLimit(),
         handlers: Handlers = Handlers(), programLiveness: @escaping @Sendable () -> ProgramLiveness = { .unknown },
         onClose: @escaping @Sendable () -> Void) {
        self.handlers = handlers
        maximumOutstandingIncoming = max(1, handlers.maximumOutstandingMessages)
        self.programLiveness = programLiveness
        self.monitor = monitor
        self.onClose = onClose
        self.sendQueueLimit = sendQueueLimit
        self.descriptor = descriptor
        state = Mutex(State(receiver: FrameReceiver(descriptor: descriptor, untrustedPeer: true)))
        output = Mutex(Output(sender: FrameSender(descriptor: descriptor, untrustedPeer: true)))
        // A fresh socket's buffer takes a HELLO whole; `enqueue` never blocks (MSG_DONTWAIT).
        let failure: ExtensionError? = output.withLock { output in
            do throws(WireError) {
                try output.sender.enqueue(.hello(Hello(name: name)))
                return output.sender.hasPendingOutput ? .connectionClosed(detail: "the HELLO could not be written") : nil
            } catch {
                return .wire(error)
            }
        }
        if let failure { close(because: failure) }
    }

    /// Waits for the extension's answer to the HELLO: its own HELLO (accepted), or an ERROR
    /// (rejected), or nothing in `timeout`. Closes the connection when it fails.
    func handshake(timeout: Duration) async throws(ExtensionError) {
        // An extension that never answers must not hang the host.
        let deadline = Deadlines.shared.add(after: timeout) { [weak self] in
            guard let self, self.state.withLock({ $0.handshake != nil }) else { return }
            self.close(because: .connectionClosed(detail: "the extension did not answer the handshake in time"))
        }
        defer { Deadlines.shared.cancel(deadline) }
        let answer = await withCheckedContinuation { (continuation: Handshake) in
            let opened: Result<FileDescriptor, ExtensionError> = state.withLock { state in
                if let closed = state.closedBecause { return .failure(closed) }
                guard state.open else { return .failure(.connectionClosed(detail: "the extension closed the connection")) }
                state.handshake = continuation
                return .success(descriptor)
            }
            guard case .success(let descriptor) = opened else {
                if case .failure(let failure) = opened { continuation.resume(returning: .failure(failure)) }
                return
            }
            // The answer usually comes within a round trip or two: take it on this thread
            // when it does, and only then hand the socket to the monitor thread (which then
            // never wakes for the answer too, nor contends for the lock).
            if waitBriefly(for: descriptor) == true { eventsArrived(EventMonitor.readable) }
            let watchFailure: SandboxError? = state.withLock { state in
                guard state.open else { return nil }  // closed meanwhile: that failed the handshake
                do throws(EventMonitor.Failure) {
                    // Paused already if the extension's requests came with its HELLO.
                    let token = try monitor.add(fd: descriptor, events: state.readingPaused ? 0 : EventMonitor.readable) { [weak self] events in
                        self?.eventsArrived(events)
                    }
                    self.token.store(token, ordering: .relaxed)
                    return nil
                } catch {
                    return SandboxError(error)
                }
            }
            // Unwatched, nothing more would be read: close (which fails a pending handshake).
            if let watchFailure { close(because: .monitorFailed(watchFailure)) }
        }
        switch answer {
        case .success(let peerMaximum):
            // No request is sent before the handshake is done: nothing else uses the encoder yet.
            output.withLock { output in if output.open { output.sender.encoder.maximumFrameSize = peerMaximum } }
        case .failure(let error):
            close(because: error)
            throw error
        }
    }

    deinit {
        close(because: .invalidated)
    }

    /// Whether the connection is still open.
    public var isOpen: Bool { state.withLock { $0.closedBecause == nil } }

    /// Closes the connection: pending requests fail with ``ExtensionError/invalidated``. The
    /// extension process ends when its last connection is gone (and no host holds it).
    public func invalidate() {
        output.withLock { output in
            // The extension closes its end on the GOODBYE, often before this thread gets to close
            // ours: its hang-up would wake the monitor thread for a connection that is closing.
            // (While `output` is open the descriptor is ours: it closes only after.)
            if output.open { monitor.stopWatching(fd: descriptor) }
            // Marked first: the extension closes its end on our GOODBYE, and the monitor thread
            // may see that before this thread gets to close; it must read as invalidated too.
            state.withLock { $0.invalidating = true }
            if output.open { _ = try? output.sender.enqueue(.goodbye) }
        }
        close(because: .invalidated)
    }

    /// Fails every pending request with `reason` and closes (the process ended).
    func interrupt(_ termination: Termination) {
        close(because: .interrupted(termination))
    }

    /// Closes once: stops watching, closes the socket, fails what waits, tells the process.
    func close(because reason: ExtensionError) {
        var roomWaiters: [RoomWaiter] = []
        let (pending, handshake, wasOpen, release, reason) = output.withLock { output in
            output.open = false
            roomWaiters = takeRoomWaiters(&output)
            return state.withLock { state -> ([Reply], Handshake?, Bool, Bool, ExtensionError) in
                guard state.closedBecause == nil else { return ([], nil, false, false, reason) }
                let reason = state.invalidating ? ExtensionError.invalidated : reason
                state.closedBecause = reason
                let release = state.open
                state.open = false
                let pending = Array(state.pending.values)
                state.pending.removeAll()
                let handshake = state.handshake
                state.handshake = nil
                // The extension's requests are cancelled: their answers have nowhere to go.
                for task in state.incoming.values { task.cancel() }
                state.incoming.removeAll()
                return (pending, handshake, true, release, reason)
            }
        }
        // They look again and find the connection closed.
        for waiter in roomWaiters { waiter.resume(returning: .success(())) }
        if release { closeSocket() }
        for continuation in pending { continuation.resume(returning: .failure(reason)) }
        handshake?.resume(returning: .failure(reason))
        if wasOpen && !closeNotified.exchange(true, ordering: .relaxed) { onClose() }
    }

    /// Stops watching and closes the socket, leaving pending requests for ``close(because:)``.
    func releaseSocket() {
        let release = output.withLock { output in
            output.open = false
            return state.withLock { state in
                defer { state.open = false }
                return state.open
            }
        }
        if release { closeSocket() }
    }

    /// The system calls of closing, outside the locks (the monitor thread may want `state` for
    /// the last bytes meanwhile): once `open` is false under both locks, nothing else touches
    /// the socket. `remove` returns once no handler of ours runs; then the two directions let go
    /// of the descriptor (the sender closes the fds still queued) and it closes, as untrusted:
    /// its last close releases the frames the extension sent that were not read, fds included.
    func closeSocket() {
        monitor.remove(fd: descriptor, token: token.load(ordering: .relaxed))
        output.withLock { $0.sender.detach() }
        state.withLock { $0.receiver.detach() }
        if let number = descriptor.release() { UntrustedDescriptors.close([number]) }
    }

    /// Copies of `fds` (close-on-exec), owned by the send that writes them: the caller's stay
    /// open. A descriptor already closed (or released) cannot be sent.
    static func duplicate(_ fds: [FileDescriptor]) throws(ExtensionError) -> [FileDescriptor] {
        var copies: [FileDescriptor] = []
        for fd in fds {
            guard fd.isOpen else { throw .coding("file descriptor \(fd.rawValue) cannot be sent: it was closed") }
            guard let copy = FileDescriptor(adopting: fcntl(fd.rawValue, F_DUPFD_CLOEXEC, 0)) else {
                throw .coding("file descriptor \(fd.rawValue) cannot be sent: \(String(cString: strerror(errno)))")
            }
            copies.append(copy)
        }
        return copies
    }
}
