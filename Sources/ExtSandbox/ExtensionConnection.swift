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
    private typealias Reply = CheckedContinuation<ExtensionMessage, any Error>

    private struct State {
        var socket: FrameSocket?
        var token: UInt64 = 0
        var pending: [UInt64: Reply] = [:]
        /// Requests we cancelled: a late reply to one of them is not a protocol error.
        var cancelled: Set<UInt64> = []
        var handshake: CheckedContinuation<Void, any Error>?
        var closedBecause: ExtensionError?
        var watchingWritability = false
    }

    private let state: Mutex<State>
    private let nextRequestID = Atomic<UInt64>(1)
    private let monitor: EventMonitor
    private let onClose: @Sendable () -> Void
    private let closeNotified = Atomic<Bool>(false)

    /// Wraps the host end of a new connection and performs the handshake.
    init(descriptor: Int32, monitor: EventMonitor, name: String, handshakeTimeout: Duration,
         onClose: @escaping @Sendable () -> Void) async throws {
        self.monitor = monitor
        self.onClose = onClose
        let socket = FrameSocket(descriptor: descriptor)
        let nonBlocking = Result { () throws(WireError) in try socket.setNonBlocking(true) }
        state = Mutex(State(socket: socket))
        // An extension that never answers must not hang the host.
        let deadline = Deadlines.shared.add(after: handshakeTimeout) { [weak self] in
            guard let self, self.state.withLock({ $0.handshake != nil }) else { return }
            self.close(because: .connectionClosed(detail: "the extension did not answer the handshake in time"))
        }
        defer { Deadlines.shared.cancel(deadline) }
        do {
            try nonBlocking.get()
            let token = try monitor.add(fd: descriptor, events: EventMonitor.readable) { [weak self] events in
                self?.eventsArrived(events)
            }
            state.withLock { $0.token = token }
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let failure: (any Error)? = state.withLock { state in
                    state.handshake = continuation
                    do {
                        try state.socket?.enqueue(.hello(Hello(name: name)))
                        return nil
                    } catch {
                        state.handshake = nil
                        return error
                    }
                }
                if let failure { continuation.resume(throwing: ExtensionError.connectionClosed(detail: "\(failure)")) }
            }
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
    public func send(_ message: ExtensionMessage) async throws -> ExtensionMessage {
        let id = nextRequestID.add(1, ordering: .relaxed).oldValue
        let fds = try Self.duplicate(message.fileDescriptors)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: Reply) in
                // `enqueue` owns the copies from here on (it closes them once sent, or on failure).
                let failure: ExtensionError? = state.withLock { state in
                    if let closed = state.closedBecause {
                        Self.close(fds)
                        return closed
                    }
                    state.pending[id] = continuation
                    if let error = enqueue(.request(id: id, payload: message.payload, fds: fds), in: &state) {
                        state.pending[id] = nil
                        return error
                    }
                    return nil
                }
                if let failure { continuation.resume(throwing: failure) }
            }
        } onCancel: {
            let continuation: Reply? = state.withLock { state in
                guard let continuation = state.pending.removeValue(forKey: id) else { return nil }
                state.cancelled.insert(id)
                _ = enqueue(.cancel(id: id), in: &state)
                return continuation
            }
            continuation?.resume(throwing: ExtensionError.cancelled)
        }
    }

    /// Sends a message that gets no reply.
    public func sendOneWay(_ message: ExtensionMessage) throws {
        let fds = try Self.duplicate(message.fileDescriptors)
        let failure: ExtensionError? = state.withLock { state in
            if let closed = state.closedBecause {
                Self.close(fds)
                return closed
            }
            return enqueue(.oneway(payload: message.payload, fds: fds), in: &state)
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
        state.withLock { state in
            if state.closedBecause == nil, let socket = state.socket {
                _ = try? socket.enqueue(.goodbye)
            }
        }
        close(because: .invalidated)
    }

    /// Fails every pending request with `reason` and closes (the process ended).
    func interrupt(_ termination: Termination) {
        close(because: .interrupted(termination))
    }

    // MARK: - Internals

    /// Queues a frame, taking its fds (closed once sent, or now on failure); arms writability
    /// when it could not be written at once.
    private func enqueue(_ frame: Frame, in state: inout State) -> ExtensionError? {
        guard let socket = state.socket else {
            frame.closeFDs()
            return state.closedBecause ?? .connectionClosed(detail: "the extension closed the connection")
        }
        do {
            try socket.enqueue(frame)
        } catch {
            return .connectionClosed(detail: "\(error)")
        }
        if socket.hasPendingOutput && !state.watchingWritability {
            state.watchingWritability = true
            monitor.modify(fd: socket.descriptor, token: state.token, events: EventMonitor.readable | EventMonitor.writable)
        }
        return nil
    }

    /// On the monitor thread: write what is queued, read what arrived, never block.
    private func eventsArrived(_ events: UInt32) {
        var replies: [(Reply, Result<ExtensionMessage, any Error>)] = []
        var handshakeDone: (CheckedContinuation<Void, any Error>, Result<Void, any Error>)?
        var closeReason: ExtensionError?
        var peerClosed = false
        state.withLock { state in
            guard let socket = state.socket else { return }
            if events & EventMonitor.writable != 0 {
                do {
                    if try socket.flush(), state.watchingWritability {
                        state.watchingWritability = false
                        monitor.modify(fd: socket.descriptor, token: state.token, events: EventMonitor.readable)
                    }
                } catch {
                    closeReason = .connectionClosed(detail: "\(error)")
                    return
                }
            }
            guard events & (EventMonitor.readable | EventMonitor.hangUp | EventMonitor.error) != 0 else { return }
            while closeReason == nil {
                let result: FrameSocket.ReceiveResult
                do {
                    result = try socket.tryReceive()
                } catch {
                    closeReason = .connectionClosed(detail: "protocol error from the extension: \(error)")
                    break
                }
                switch result {
                case .wouldBlock:
                    return
                case .closed:
                    peerClosed = true
                    closeReason = .connectionClosed(detail: "the extension closed the connection")
                case .frame(let frame):
                    closeReason = handle(frame, state: &state, replies: &replies, handshakeDone: &handshakeDone)
                }
            }
        }
        for (continuation, result) in replies { continuation.resume(with: result) }
        if let (continuation, result) = handshakeDone { continuation.resume(with: result) }
        guard let closeReason else { return }
        if peerClosed && state.withLock({ !$0.pending.isEmpty }) {
            // An extension that dies closes its sockets a moment before its exit is known:
            // give the process's end a short while to fail the requests with the real reason.
            releaseSocket()
            Task { [weak self] in
                try? await Task.sleep(for: .milliseconds(200))
                self?.close(because: closeReason)
            }
        } else {
            close(because: closeReason)
        }
    }

    /// Stops watching and closes the socket, leaving pending requests for ``close(because:)``.
    private func releaseSocket() {
        state.withLock { state in
            if let socket = state.socket {
                monitor.remove(fd: socket.descriptor, token: state.token)
                socket.close()
            }
            state.socket = nil
        }
    }

    private func handle(
        _ frame: Frame, state: inout State, replies: inout [(Reply, Result<ExtensionMessage, any Error>)],
        handshakeDone: inout (CheckedContinuation<Void, any Error>, Result<Void, any Error>)?
    ) -> ExtensionError? {
        if let handshake = state.handshake {
            state.handshake = nil
            switch frame.kind {
            case .hello:
                do {
                    let hello = try frame.hello()
                    try hello.checkVersion()
                    state.socket?.encoder.maximumFrameSize = hello.maximumFrameSize
                    handshakeDone = (handshake, .success(()))
                    return nil
                } catch {
                    handshakeDone = (handshake, .failure(ExtensionError.connectionClosed(detail: "bad HELLO: \(error)")))
                    return .connectionClosed(detail: "bad HELLO: \(error)")
                }
            case .error:
                let message = (try? frame.errorPayload().message) ?? ""
                handshakeDone = (handshake, .failure(ExtensionError.rejected(message)))
                return .rejected(message)
            default:
                frame.closeFDs()
                let reason = ExtensionError.connectionClosed(detail: "expected HELLO, got \(frame.kind)")
                handshakeDone = (handshake, .failure(reason))
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
                replies.append((continuation, .success(ExtensionMessage(frame.payload, fileDescriptors: frame.fds))))
            } else {
                let payload = try? frame.errorPayload()
                replies.append((continuation, .failure(ExtensionError.remote(code: payload?.code.rawValue ?? 0, message: payload?.message ?? ""))))
            }
            return nil
        case .oneway:
            // Hosts take no one-way messages from extensions: a flood of them (or of fds) must
            // not be absorbed silently.
            frame.closeFDs()
            return .connectionClosed(detail: "the extension sent a one-way message, which hosts do not accept")
        case .goodbye:
            return .connectionClosed(detail: "the extension said goodbye")
        default:
            frame.closeFDs()
            return .connectionClosed(detail: "unexpected \(frame.kind) frame from the extension")
        }
    }

    /// Closes once: stops watching, closes the socket, fails what waits, tells the process.
    private func close(because reason: ExtensionError) {
        let (pending, handshake, wasOpen) = state.withLock { state -> ([Reply], CheckedContinuation<Void, any Error>?, Bool) in
            guard state.closedBecause == nil else { return ([], nil, false) }
            state.closedBecause = reason
            if let socket = state.socket {
                monitor.remove(fd: socket.descriptor, token: state.token)
                socket.close()
            }
            state.socket = nil
            let pending = Array(state.pending.values)
            state.pending.removeAll()
            let handshake = state.handshake
            state.handshake = nil
            return (pending, handshake, true)
        }
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
