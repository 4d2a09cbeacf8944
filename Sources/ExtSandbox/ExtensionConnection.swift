import CSandboxShim
import ExtSandboxWire
import Foundation
import Glibc
import SandboxRuntime
import Synchronization

/// Bytes and file descriptors, the unit of the extension channel.
public struct ExtensionMessage: Sendable, Hashable {
    public var payload: [UInt8]
    /// Descriptors that travel with the message (at most 16). Sent ones stay the sender's (they
    /// are duplicated); received ones belong to the receiver, who must close them.
    public var fileDescriptors: [Int32]

    public init(_ payload: [UInt8] = [], fileDescriptors: [Int32] = []) {
        self.payload = payload
        self.fileDescriptors = fileDescriptors
    }
}

/// One channel to an extension, made by ``AppExtensionProcess/makeConnection()``.
///
/// Requests get exactly one reply or one error; a cancelled task cancels its request. The
/// connection keeps its extension process alive until ``invalidate()`` (or until it is
/// released). Like ExtensionFoundation's `NSXPCConnection`, but with messages in bytes (and
/// Codable conveniences) instead of proxies.
public final class ExtensionConnection: Sendable {
    private typealias Reply = UnsafeContinuation<ExtensionMessage, any Error>
    private typealias Handshake = CheckedContinuation<UInt32, any Error>

    /// Everything but sending. The socket is read under this lock: by the monitor thread, and
    /// by a caller waiting briefly for its reply (``waitForReadableBriefly(_:)``).
    private struct State {
        /// Whether the socket is still open (it closes before `closedBecause` is set when the
        /// extension hung up with requests pending: see `eventsArrived`).
        var open = true
        var pending: [UInt64: Reply] = [:]
        /// Requests we cancelled: a late reply to one of them is not a protocol error.
        var cancelled: Set<UInt64> = []
        /// The task waiting for the extension's HELLO (it returns the peer's maximum frame size).
        var handshake: Handshake?
        var closedBecause: ExtensionError?
        /// Caller-thread waits to skip (see ``waitForReadableBriefly(_:)``).
        var waitsToSkip = 0
        /// ``invalidate()`` has begun: however the socket closes from now on (the extension
        /// closing it on our GOODBYE included), the reason is ``ExtensionError/invalidated``.
        var invalidating = false
        /// The extension's requests being handled, by id (a CANCEL cancels the task).
        var incoming: [UInt64: Task<Void, Never>] = [:]
        /// The last one-way message's handler task: the next one waits for it (in order).
        var lastOneWay: Task<Void, Never>?
    }

    /// Sending. Held while a frame is written, so that frames go out whole and in order, and
    /// never while reading: a sender that the scheduler preempts in `sendmsg` (the extension it
    /// just woke takes its CPU) must not keep the monitor thread from reading the reply.
    private struct Output {
        var open = true
        var watchingWritability = false
        /// Senders waiting for room in the send queue (see ``SendQueueLimit``).
        var roomWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
    }

    /// What the host does with the extension's own requests and one-way messages on this
    /// connection (ExtensionFoundation's exported object). Set them when making the connection:
    /// ``AppExtensionProcess/makeConnection(handlers:)``.
    public struct Handlers: Sendable {
        /// Answers one request from the extension: its result is the REPLY, a thrown
        /// ``ExtensionFailure`` an ERROR with its code, anything else ERROR 5. Runs in a task of its
        /// own, cancelled when the extension cancels the request or the connection closes (the
        /// answer is then ERROR 3, or nothing once closed). Without one, every request is
        /// answered with ERROR 2 (unknown request).
        public var onRequest: (@Sendable (ExtensionMessage) async throws -> ExtensionMessage)?
        /// Receives the extension's one-way messages, one at a time, in order. Without one they
        /// are dropped (their fds closed).
        public var onOneWay: (@Sendable (ExtensionMessage) async -> Void)?

        public init(onRequest: (@Sendable (ExtensionMessage) async throws -> ExtensionMessage)? = nil,
                    onOneWay: (@Sendable (ExtensionMessage) async -> Void)? = nil) {
            self.onRequest = onRequest
            self.onOneWay = onOneWay
        }
    }

    /// An error answer from a ``Handlers/onRequest`` handler: a code (100 and above are the
    /// application's) and a message.
    public struct ExtensionFailure: Error, Sendable {
        public var code: UInt32
        public var message: String

        public init(code: UInt32 = 100, _ message: String) {
            self.code = code
            self.message = message
        }
    }

    /// Bounds of a connection's send queue: frames written while the extension does not read
    /// wait in the host's memory (with their fds open) up to these. Beyond them ``send(_:)``
    /// waits for room, and ``sendOneWay(_:)`` fails at once with
    /// ``ExtensionError/sendQueueFull(bytes:fileDescriptors:)``. A frame is always admitted
    /// into an empty queue, whatever its size.
    public struct SendQueueLimit: Sendable, Hashable {
        /// Bytes of frames waiting (default 4 MiB).
        public var bytes: Int
        /// File descriptors attached to frames waiting (default 64).
        public var fileDescriptors: Int

        public init(bytes: Int = 4 << 20, fileDescriptors: Int = 64) {
            self.bytes = bytes
            self.fileDescriptors = fileDescriptors
        }
    }

    /// The socket. Its receiving side is used under `state`, its sending side under `output`;
    /// closing it takes both (`output` first, the lock order everywhere).
    private let socket: UncheckedBox<FrameSocket>
    private let state = Mutex(State())
    private let output = Mutex(Output())
    private let token = Atomic<UInt64>(0)
    private let nextRequestID = Atomic<UInt64>(1)
    private let monitor: EventMonitor
    private let onClose: @Sendable () -> Void
    private let closeNotified = Atomic<Bool>(false)
    private let sendQueueLimit: SendQueueLimit
    private let nextRoomWaiter = Atomic<UInt64>(1)
    private let handlers: Handlers

    /// Wraps the host end of a new connection and writes the host's HELLO into it at once, so
    /// that the extension finds it waiting when it gets its end (``handshake(timeout:)`` then
    /// waits for the answer). Later, requests are written by their callers, and replies read
    /// on `monitor` (or by a caller waiting briefly for its own).
    init(descriptor: Int32, monitor: EventMonitor, name: String, sendQueueLimit: SendQueueLimit = SendQueueLimit(),
         handlers: Handlers = Handlers(), onClose: @escaping @Sendable () -> Void) {
        self.handlers = handlers
        self.monitor = monitor
        self.onClose = onClose
        self.sendQueueLimit = sendQueueLimit
        socket = UncheckedBox(FrameSocket(descriptor: descriptor))
        // A fresh socket's buffer takes a HELLO whole; `enqueue` never blocks (MSG_DONTWAIT).
        let failure: ExtensionError? = output.withLock { output in
            do {
                try socket.value.enqueue(.hello(Hello(name: name)))
                return socket.value.hasPendingOutput ? .connectionClosed(detail: "the HELLO could not be written") : nil
            } catch {
                return .connectionClosed(detail: "\(error)")
            }
        }
        if let failure { close(because: failure) }
    }

    /// Waits for the extension's answer to the HELLO: its own HELLO (accepted), or an ERROR
    /// (rejected), or nothing in `timeout`. Closes the connection when it fails.
    func handshake(timeout: Duration) async throws {
        // An extension that never answers must not hang the host.
        let deadline = Deadlines.shared.add(after: timeout) { [weak self] in
            guard let self, self.state.withLock({ $0.handshake != nil }) else { return }
            self.close(because: .connectionClosed(detail: "the extension did not answer the handshake in time"))
        }
        defer { Deadlines.shared.cancel(deadline) }
        do {
            let peerMaximum = try await withCheckedThrowingContinuation { (continuation: Handshake) in
                let opened: Result<Int32, any Error> = state.withLock { state in
                    if let closed = state.closedBecause { return .failure(closed) }
                    guard state.open else { return .failure(ExtensionError.connectionClosed(detail: "the extension closed the connection")) }
                    state.handshake = continuation
                    return .success(socket.value.descriptor)
                }
                guard case .success(let descriptor) = opened else {
                    if case .failure(let failure) = opened { continuation.resume(throwing: failure) }
                    return
                }
                // The answer usually comes within a round trip or two: take it on this thread
                // when it does, and only then hand the socket to the monitor thread (which then
                // never wakes for the answer too, nor contends for the lock).
                if waitBriefly(for: descriptor) == true { eventsArrived(EventMonitor.readable) }
                let watchFailure: (any Error)? = state.withLock { state in
                    guard state.open else { return nil }  // closed meanwhile: that failed the handshake
                    do {
                        let token = try monitor.add(fd: socket.value.descriptor, events: EventMonitor.readable) { [weak self] events in
                            self?.eventsArrived(events)
                        }
                        self.token.store(token, ordering: .relaxed)
                        return nil
                    } catch {
                        return error
                    }
                }
                // Unwatched, nothing more would be read: close (which fails a pending handshake).
                if let watchFailure { close(because: .connectionClosed(detail: "cannot watch the socket: \(watchFailure)")) }
            }
            // No request is sent before the handshake is done: nothing else uses the encoder yet.
            output.withLock { output in if output.open { socket.value.encoder.maximumFrameSize = peerMaximum } }
        } catch {
            close(because: error as? ExtensionError ?? .connectionClosed(detail: "\(error)"))
            throw error
        }
    }

    deinit {
        close(because: .invalidated)
    }

    /// Whether the connection is still open.
    public var isOpen: Bool { state.withLock { $0.closedBecause == nil } }

    /// Sends a request and waits for its one reply (or error).
    ///
    /// While the connection's send queue is full (the extension is not reading), waits for room
    /// (see ``SendQueueLimit``); a request cancelled before it was written is dropped from the
    /// queue, its fds closed, and never reaches the extension. A message larger than the
    /// extension's maximum frame size fails with ``ExtensionError/messageTooLarge(size:maximum:)``
    /// and the connection stays open.
    public func send(_ message: ExtensionMessage) async throws -> ExtensionMessage {
        let id = nextRequestID.add(1, ordering: .relaxed).oldValue
        // Copies of the fds are made once there is room: a waiting sender holds none of ours.
        try await waitForRoom(bytes: ExtSandboxWire.headerSize + 4 + message.payload.count, fds: message.fileDescriptors.count)
        let fds = try Self.duplicate(message.fileDescriptors)
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: Reply) in
                // Registered and written under `output`: a CANCEL never overtakes its REQUEST.
                let failed: (Reply, ExtensionError)? = output.withLock { output in
                    let refused: ExtensionError? = state.withLock { state in
                        if let closed = state.closedBecause { return closed }
                        state.pending[id] = continuation
                        return nil
                    }
                    if let refused {
                        Self.close(fds)
                        return (continuation, refused)
                    }
                    let failure: ExtensionError?
                    if Task.isCancelled {
                        // Cancelled before the handler below was installed: it found nothing to cancel.
                        Self.close(fds)
                        failure = .cancelled
                    } else {
                        // `write` owns the copies from here on (it closes them once sent, or on failure).
                        failure = write(.request(id: id, payload: message.payload, fds: fds), &output)
                    }
                    // Unless something else (a close) failed it already.
                    guard let failure, let waiting = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return nil }
                    return (waiting, failure)
                }
                if let (waiting, failure) = failed {
                    waiting.resume(throwing: failure)
                } else {
                    waitForReadableBriefly { $0.pending.count == 1 && $0.pending[id] != nil }
                }
            }
        } onCancel: {
            let (continuation, waiters): (Reply?, [CheckedContinuation<Void, any Error>]) = output.withLock { output in
                // Never written: dropped from the queue (its fds closed); no answer will come.
                let unsent = output.open && socket.value.removeUnsent(kind: .request, id: id)
                let continuation: Reply? = state.withLock { state in
                    guard let continuation = state.pending.removeValue(forKey: id) else { return nil }
                    if !unsent { state.cancelled.insert(id) }
                    return continuation
                }
                if continuation != nil && !unsent { _ = write(.cancel(id: id), &output) }
                return (continuation, unsent ? takeRoomWaiters(&output) : [])
            }
            for waiter in waiters { waiter.resume() }
            continuation?.resume(throwing: ExtensionError.cancelled)
        }
    }

    /// Returns once the send queue has room for a frame of `bytes` with `fds` descriptors (at
    /// once, usually); throws when the connection closes or the task is cancelled meanwhile.
    private func waitForRoom(bytes: Int, fds: Int) async throws {
        while true {
            if try output.withLock({ output in try self.hasRoom(bytes: bytes, fds: fds, output) }) { return }
            let waiterID = nextRoomWaiter.add(1, ordering: .relaxed).oldValue
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    let now: Result<Void, any Error>? = output.withLock { output in
                        do {
                            if try hasRoom(bytes: bytes, fds: fds, output) { return .success(()) }
                        } catch {
                            return .failure(error)
                        }
                        if Task.isCancelled { return .failure(ExtensionError.cancelled) }
                        output.roomWaiters[waiterID] = continuation
                        return nil
                    }
                    if let now { continuation.resume(with: now) }
                }
            } onCancel: {
                output.withLock { $0.roomWaiters.removeValue(forKey: waiterID) }?.resume(throwing: ExtensionError.cancelled)
            }
        }
    }

    /// Under `output`: whether a frame of `bytes` with `fds` fits the send queue now; throws
    /// the connection's end when it is closed.
    private func hasRoom(bytes: Int, fds: Int, _ output: Output) throws -> Bool {
        guard output.open else {
            throw state.withLock { $0.closedBecause } ?? ExtensionError.connectionClosed(detail: "the extension closed the connection")
        }
        let socket = socket.value
        let queuedBytes = socket.pendingOutputBytes, queuedFDs = socket.pendingOutputFDs
        if queuedBytes == 0 && queuedFDs == 0 { return true }
        return queuedBytes + bytes <= sendQueueLimit.bytes && queuedFDs + fds <= sendQueueLimit.fileDescriptors
    }

    /// Under `output`: the senders waiting for room, to be resumed (outside the lock) to look again.
    private func takeRoomWaiters(_ output: inout Output) -> [CheckedContinuation<Void, any Error>] {
        guard !output.roomWaiters.isEmpty else { return [] }
        defer { output.roomWaiters.removeAll() }
        return Array(output.roomWaiters.values)
    }

    /// Sends a message that gets no reply. Fails at once with
    /// ``ExtensionError/sendQueueFull(bytes:fileDescriptors:)`` when the connection's send queue
    /// is full (see ``SendQueueLimit``; ``sendOneWayWaitingForRoom(_:)`` waits instead).
    public func sendOneWay(_ message: ExtensionMessage) throws {
        let fds = try Self.duplicate(message.fileDescriptors)
        let frameBytes = ExtSandboxWire.headerSize + 4 + message.payload.count
        let failure: (any Error)? = output.withLock { output in
            do {
                guard try hasRoom(bytes: frameBytes, fds: fds.count, output) else {
                    Self.close(fds)
                    return ExtensionError.sendQueueFull(bytes: sendQueueLimit.bytes, fileDescriptors: sendQueueLimit.fileDescriptors)
                }
            } catch {
                Self.close(fds)
                return error
            }
            return write(.oneway(payload: message.payload, fds: fds), &output)
        }
        if let failure { throw failure }
    }

    /// Sends a message that gets no reply, waiting while the connection's send queue is full.
    public func sendOneWayWaitingForRoom(_ message: ExtensionMessage) async throws {
        try await waitForRoom(bytes: ExtSandboxWire.headerSize + 4 + message.payload.count, fds: message.fileDescriptors.count)
        let fds = try Self.duplicate(message.fileDescriptors)
        let failure: ExtensionError? = output.withLock { output in
            write(.oneway(payload: message.payload, fds: fds), &output)
        }
        if let failure { throw failure }
    }

    /// Sends `request` as JSON and decodes the reply as `Response`.
    public func send<Request: Encodable, Response: Decodable>(_ request: Request, expecting: Response.Type) async throws -> Response {
        let payload: [UInt8]
        do { payload = Array(try JSONEncoder().encode(request)) } catch { throw ExtensionError.coding("\(error)") }
        let reply = try await send(ExtensionMessage(payload))
        Self.close(reply.fileDescriptors)
        do { return try JSONDecoder().decode(Response.self, from: Data(reply.payload)) } catch { throw ExtensionError.coding("\(error)") }
    }

    /// Closes the connection: pending requests fail with ``ExtensionError/invalidated``. The
    /// extension process ends when its last connection is gone (and no host holds it).
    public func invalidate() {
        output.withLock { output in
            // Marked first: the extension closes its end on our GOODBYE, and the monitor thread
            // may see that before this thread gets to close; it must read as invalidated too.
            state.withLock { $0.invalidating = true }
            if output.open { _ = try? socket.value.enqueue(.goodbye) }
        }
        close(because: .invalidated)
    }

    /// Fails every pending request with `reason` and closes (the process ended).
    func interrupt(_ termination: Termination) {
        close(because: .interrupted(termination))
    }

    // MARK: - Internals

    /// How long a caller waits on its own thread for the reply it just asked for before leaving
    /// it to the monitor thread. A quick reply then reaches the caller directly, without a hop
    /// through the monitor thread and a wake-up of the caller's executor thread (`xsb-bench
    /// --profile-rtt`: 10-15 µs less of a 50-70 µs round trip, in every one of 8 paired runs).
    /// The wait sleeps in the kernel (ppoll) and is bounded; only a connection's sole outstanding
    /// request waits, and only one caller in the process at a time; after a wait that timed out
    /// the connection skips the next few, so a slow extension costs its callers' threads at most
    /// this long every few requests.
    static let callerWait: Duration = .microseconds(100)
    /// Waits skipped after one that timed out.
    static let waitsSkippedAfterTimeout = 8
    /// Callers waiting at once, in the whole process: one, so that many connections with one
    /// request each never hold several executor threads in `ppoll` together.
    private static let maximumWaiters = 1
    private static let waiters = Atomic<Int>(0)

    /// After a request went out: if `alone(state)` holds, waits up to
    /// ``callerWait`` for the socket to become readable and reads what arrived on this thread,
    /// resuming the continuations it answers (ours among them) directly. The monitor thread may
    /// be woken by the same data and read concurrently: `state` serializes reading, so each frame
    /// is handled once, by whichever thread got it.
    private func waitForReadableBriefly(_ alone: (State) -> Bool) {
        let descriptor: Int32? = state.withLock { state in
            guard state.open, alone(state) else { return nil }
            guard state.waitsToSkip == 0 else {
                state.waitsToSkip -= 1
                return nil
            }
            return socket.value.descriptor
        }
        guard let descriptor else { return }
        switch waitBriefly(for: descriptor) {
        case true?: eventsArrived(EventMonitor.readable)
        case false?: state.withLock { $0.waitsToSkip = Self.waitsSkippedAfterTimeout }
        case nil: break  // another caller is waiting
        }
    }

    /// Waits up to ``callerWait`` for `descriptor` to become readable: true when it is, false
    /// after the wait timed out, nil (at once) when another caller in the process is waiting.
    private func waitBriefly(for descriptor: Int32) -> Bool? {
        guard Self.waiters.add(1, ordering: .relaxed).newValue <= Self.maximumWaiters else {
            Self.waiters.subtract(1, ordering: .relaxed)
            return nil
        }
        defer { Self.waiters.subtract(1, ordering: .relaxed) }
        let (seconds, attoseconds) = Self.callerWait.components
        return xsb_wait_readable(descriptor, Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)) == 1
    }

    /// Writes a frame (under `output`), taking its fds (closed once sent, or now on failure);
    /// watches writability when it could not be written at once.
    private func write(_ frame: Frame, _ output: inout Output) -> ExtensionError? {
        guard output.open else {
            frame.closeFDs()
            return state.withLock { $0.closedBecause } ?? .connectionClosed(detail: "the extension closed the connection")
        }
        let socket = socket.value
        do {
            try socket.enqueue(frame)
        } catch .frameTooLarge(let length, let maximum) {
            // Checked before a byte was written: the connection carries on.
            return .messageTooLarge(size: Int(length), maximum: maximum)
        } catch {
            return .connectionClosed(detail: "\(error)")
        }
        if socket.hasPendingOutput && !output.watchingWritability {
            output.watchingWritability = true
            monitor.modify(fd: socket.descriptor, token: token.load(ordering: .relaxed),
                           events: EventMonitor.readable | EventMonitor.writable)
        }
        return nil
    }

    /// On the monitor thread (or a caller's, readable only): write what is queued, read what
    /// arrived, never block. Each frame is handled under the lock and its waiter resumed right
    /// after it, outside the lock.
    private func eventsArrived(_ events: UInt32) {
        if events & EventMonitor.writable != 0 {
            var roomWaiters: [CheckedContinuation<Void, any Error>] = []
            let failure: ExtensionError? = output.withLock { output in
                guard output.open else { return nil }
                do {
                    if try socket.value.flush(), output.watchingWritability {
                        output.watchingWritability = false
                        monitor.modify(fd: socket.value.descriptor, token: token.load(ordering: .relaxed), events: EventMonitor.readable)
                    }
                    roomWaiters = takeRoomWaiters(&output)
                    return nil
                } catch {
                    return .connectionClosed(detail: "\(error)")
                }
            }
            for waiter in roomWaiters { waiter.resume() }
            if let failure {
                close(because: failure)
                return
            }
        }
        guard events & (EventMonitor.readable | EventMonitor.hangUp | EventMonitor.error) != 0 else { return }
        while true {
            var answer: Answer?
            var closeReason: ExtensionError?
            var peerClosed = false
            /// A frame to write back (an ERROR 2 answer; ERROR id 0 for a bad HELLO, before closing).
            var farewell: Frame?
            let more = state.withLock { state -> Bool in
                guard state.open else { return false }
                do {
                    switch try socket.value.receiveNext(wait: false) {
                    case .wouldBlock:
                        return false
                    case .closed:
                        peerClosed = true
                        closeReason = .connectionClosed(detail: "the extension closed the connection")
                    case .frame(let frame):
                        closeReason = handle(frame, state: &state, answer: &answer, farewell: &farewell)
                    }
                } catch {
                    closeReason = .connectionClosed(detail: "protocol error from the extension: \(error)")
                }
                return closeReason == nil
            }
            switch answer {
            case .reply(let continuation, let result): continuation.resume(with: result)
            case .handshake(let continuation, let result): continuation.resume(with: result)
            case nil: break
            }
            if let farewell {
                // Written like any frame (a bad HELLO's ERROR 4 goes out before the close, §5).
                let failure = output.withLock { write(farewell, &$0) }
                if let failure, closeReason == nil { closeReason = failure }
            }
            if let closeReason {
                if peerClosed && state.withLock({ !$0.pending.isEmpty || $0.handshake != nil }) {
                    // An extension that dies closes its sockets a moment before its exit is known:
                    // give the process's end a short while to fail the requests (or the handshake)
                    // with the real reason.
                    releaseSocket()
                    Task { [weak self] in
                        try? await Task.sleep(for: .milliseconds(200))
                        self?.close(because: closeReason)
                    }
                } else {
                    close(because: closeReason)
                }
                return
            }
            if !more { return }
        }
    }

    /// What a frame from the extension answered.
    private enum Answer {
        case reply(Reply, Result<ExtensionMessage, any Error>)
        case handshake(Handshake, Result<UInt32, any Error>)
    }

    /// Stops watching and closes the socket, leaving pending requests for ``close(because:)``.
    private func releaseSocket() {
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
    /// the socket.
    private func closeSocket() {
        monitor.remove(fd: socket.value.descriptor, token: token.load(ordering: .relaxed))
        socket.value.close()
    }

    private func handle(_ frame: Frame, state: inout State, answer: inout Answer?, farewell: inout Frame?) -> ExtensionError? {
        if let handshake = state.handshake {
            state.handshake = nil
            switch frame.kind {
            case .hello:
                do {
                    let hello = try frame.hello()
                    try hello.checkVersion()
                    answer = .handshake(handshake, .success(hello.maximumFrameSize))
                    return nil
                } catch {
                    farewell = .error(id: 0, code: .protocolError, message: "\(error)")
                    answer = .handshake(handshake, .failure(ExtensionError.connectionClosed(detail: "bad HELLO: \(error)")))
                    return .connectionClosed(detail: "bad HELLO: \(error)")
                }
            case .error:
                let message = (try? frame.errorPayload().message) ?? ""
                answer = .handshake(handshake, .failure(ExtensionError.rejected(message)))
                return .rejected(message)
            default:
                frame.closeFDs()
                let reason = ExtensionError.connectionClosed(detail: "expected HELLO, got \(frame.kind)")
                answer = .handshake(handshake, .failure(reason))
                return reason
            }
        }
        switch frame.kind {
        case .reply, .error:
            guard let continuation = state.pending.removeValue(forKey: frame.id) else {
                frame.closeFDs()
                // A late answer to a request we cancelled is fine; any other is a broken peer.
                if state.cancelled.remove(frame.id) != nil { return nil }
                return .connectionClosed(detail: "the extension answered request \(frame.id), which was never sent")
            }
            if frame.kind == .reply {
                answer = .reply(continuation, .success(ExtensionMessage(frame.payload, fileDescriptors: frame.fds)))
            } else {
                let payload = try? frame.errorPayload()
                answer = .reply(continuation, .failure(ExtensionError.remote(code: payload?.code.rawValue ?? 0, message: payload?.message ?? "")))
            }
            return nil
        case .request:
            let id = frame.id
            guard state.incoming[id] == nil else {
                frame.closeFDs()
                return .connectionClosed(detail: "the extension reused request id \(id) while it was outstanding")
            }
            guard let onRequest = handlers.onRequest else {
                frame.closeFDs()
                farewell = .error(id: id, code: .unknownRequest, message: "the host has no handler for requests")
                return nil
            }
            let message = ExtensionMessage(frame.payload, fileDescriptors: frame.fds)
            state.incoming[id] = Task { [weak self] in
                let answer: Frame
                do {
                    let reply = try await onRequest(message)
                    answer = Task.isCancelled
                        ? .error(id: id, code: .cancelled, message: "cancelled")
                        : .reply(id: id, payload: reply.payload, fds: (try? Self.duplicate(reply.fileDescriptors)) ?? [])
                } catch let failure as ExtensionFailure {
                    answer = .error(id: id, code: ErrorCode(rawValue: failure.code), message: failure.message)
                } catch is CancellationError {
                    answer = .error(id: id, code: .cancelled, message: "cancelled")
                } catch ExtensionError.cancelled {
                    answer = .error(id: id, code: .cancelled, message: "cancelled")
                } catch {
                    answer = .error(id: id, code: .internalError, message: "\(error)")
                }
                self?.answer(id, with: answer)
            }
            return nil
        case .oneway:
            let message = ExtensionMessage(frame.payload, fileDescriptors: frame.fds)
            // Without a handler it is dropped (§3); with one, handled in order.
            guard let onOneWay = handlers.onOneWay else {
                Self.close(frame.fds)
                return nil
            }
            let previous = state.lastOneWay
            state.lastOneWay = Task {
                await previous?.value
                await onOneWay(message)
            }
            return nil
        case .cancel:
            // Unknown ids raced with their answer: ignored (§3).
            state.incoming[frame.id]?.cancel()
            return nil
        case .goodbye:
            return .connectionClosed(detail: "the extension said goodbye")
        default:
            frame.closeFDs()
            return .connectionClosed(detail: "unexpected \(frame.kind) frame from the extension")
        }
    }

    /// Sends a handler's answer to the extension's request `id` (exactly one: its task is
    /// removed first). A reply over the extension's maximum frame size becomes ERROR 6, and the
    /// connection carries on. Nothing is sent once the connection has closed.
    private func answer(_ id: UInt64, with frame: Frame) {
        guard state.withLock({ $0.incoming.removeValue(forKey: id) }) != nil else {
            frame.closeFDs()
            return
        }
        let failure: ExtensionError? = output.withLock { output in
            switch write(frame, &output) {
            case .messageTooLarge(let size, let maximum)?:
                return write(.error(id: id, code: .tooLarge, message: "the reply (\(size) bytes) is over the extension's maximum frame size \(maximum)"), &output)
            case let other:
                return other
            }
        }
        if let failure, case .connectionClosed = failure { close(because: failure) }
    }

    /// Closes once: stops watching, closes the socket, fails what waits, tells the process.
    func close(because reason: ExtensionError) {
        var roomWaiters: [CheckedContinuation<Void, any Error>] = []
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
        for waiter in roomWaiters { waiter.resume() }
        if release { closeSocket() }
        for continuation in pending { continuation.resume(throwing: reason) }
        handshake?.resume(throwing: reason)
        if wasOpen && !closeNotified.exchange(true, ordering: .relaxed) { onClose() }
    }

    private static func duplicate(_ fds: [Int32]) throws -> [Int32] {
        var copies: [Int32] = []
        for fd in fds {
            let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
            guard copy >= 0 else {
                close(copies)
                throw ExtensionError.coding("file descriptor \(fd) cannot be sent: \(String(cString: strerror(errno)))")
            }
            copies.append(copy)
        }
        return copies
    }

    private static func close(_ fds: [Int32]) {
        for fd in fds { Glibc.close(fd) }
    }
}
