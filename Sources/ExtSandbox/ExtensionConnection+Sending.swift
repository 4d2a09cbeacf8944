import ExtSandboxWire
import FoundationEssentials
import Glibc
import SandboxRuntime
import Synchronization

// The host's side of sending: requests (each with one answer, cancellable), one-way messages, and
// the bounded send queue they wait in.
extension ExtensionConnection {
    /// Sends a request and waits for its one reply (or error).
    ///
    /// While the connection's send queue is full (the extension is not reading), waits for room
    /// (see ``SendQueueLimit``); a request cancelled before it was written is dropped from the
    /// queue, its fds closed, and never reaches the extension. A message larger than the
    /// extension's maximum frame size fails with ``ExtensionError/messageTooLarge(size:maximum:)``
    /// and the connection stays open.
    public func send(_ message: ExtensionMessage) async throws(ExtensionError) -> ExtensionMessage {
        try await send(message, payloadTail: [])
    }

    /// ``send(_:)`` of a request whose payload is `message`'s followed by `payloadTail`, each
    /// written from its own storage (see ``Frame/payloadTail``).
    func send(_ message: ExtensionMessage, payloadTail: [UInt8]) async throws(ExtensionError) -> ExtensionMessage {
        let id = nextRequestID.add(1, ordering: .relaxed).oldValue
        // Copies of the fds are made once there is room: a waiting sender holds none of ours.
        try await waitForRoom(bytes: ExtSandboxWire.headerSize + 4 + message.payload.count + payloadTail.count,
                              fds: message.fileDescriptors.count)
        let fds = try Self.duplicate(message.fileDescriptors)
        return try await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: Reply) in
                var readingReply = false
                // Registered and written under `output`: a CANCEL never overtakes its REQUEST.
                let failed: (Reply, ExtensionError)? = output.withLock { output in
                    let refused: ExtensionError? = state.withLock { state in
                        if let closed = state.closedBecause { return closed }
                        state.pending[id] = continuation
                        return nil
                    }
                    if let refused {
                        fds.forEach { $0.close() }
                        return (continuation, refused)
                    }
                    let failure: ExtensionError?
                    if Task.isCancelled {
                        // Cancelled before the handler below was installed: it found nothing to cancel.
                        fds.forEach { $0.close() }
                        failure = .cancelled
                    } else {
                        readingReply = claimReplyReading(output, to: id)
                        // `write` owns the copies from here on (it closes them once sent, or on failure).
                        failure = write(.request(id: id, payload: message.payload, payloadTail: payloadTail, fds: fds), &output)
                        // Still queued (the socket is full): no reply can come within the look.
                        if readingReply && failure == nil && output.sender.hasPendingOutput {
                            releaseReplyReading(output)
                            readingReply = false
                        }
                    }
                    // Unless something else (a close) failed it already.
                    guard let failure, let waiting = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return nil }
                    return (waiting, failure)
                }
                // (A failed request is no longer pending: the reading ends at once.)
                if readingReply { readReplyBriefly(to: id) }
                if let (waiting, failure) = failed { waiting.resume(returning: .failure(failure)) }
            }
        } onCancel: {
            let (continuation, waiters): (Reply?, [RoomWaiter]) = output.withLock { output in
                // Never written: dropped from the queue (its fds closed); no answer will come.
                let unsent = output.open && output.sender.removeUnsent(kind: .request, id: id)
                let continuation: Reply? = state.withLock { state in
                    guard let continuation = state.pending.removeValue(forKey: id) else { return nil }
                    if !unsent { state.cancelled.insert(id) }
                    return continuation
                }
                if continuation != nil && !unsent { _ = write(.cancel(id: id), &output) }
                return (continuation, unsent ? takeRoomWaiters(&output) : [])
            }
            for waiter in waiters { waiter.resume(returning: .success(())) }
            continuation?.resume(returning: .failure(.cancelled))
        }.get()
    }

    /// Sends a message that gets no reply. Fails at once with
    /// ``ExtensionError/sendQueueFull(bytes:fileDescriptors:)`` when the connection's send queue
    /// is full (see ``SendQueueLimit``; ``sendOneWayWaitingForRoom(_:)`` waits instead).
    public func sendOneWay(_ message: ExtensionMessage) throws(ExtensionError) {
        let fds = try Self.duplicate(message.fileDescriptors)
        let frameBytes = ExtSandboxWire.headerSize + 4 + message.payload.count
        let failure: ExtensionError? = output.withLock { output in
            do throws(ExtensionError) {
                guard try hasRoom(bytes: frameBytes, fds: fds.count, output) else {
                    fds.forEach { $0.close() }
                    return .sendQueueFull(bytes: sendQueueLimit.bytes, fileDescriptors: sendQueueLimit.fileDescriptors)
                }
            } catch {
                fds.forEach { $0.close() }
                return error
            }
            return write(.oneway(payload: message.payload, fds: fds), &output)
        }
        if let failure { throw failure }
    }

    /// Sends a message that gets no reply, waiting while the connection's send queue is full.
    public func sendOneWayWaitingForRoom(_ message: ExtensionMessage) async throws(ExtensionError) {
        try await waitForRoom(bytes: ExtSandboxWire.headerSize + 4 + message.payload.count, fds: message.fileDescriptors.count)
        let fds = try Self.duplicate(message.fileDescriptors)
        let failure: ExtensionError? = output.withLock { output in
            write(.oneway(payload: message.payload, fds: fds), &output)
        }
        if let failure { throw failure }
    }

    /// Sends `request` as JSON and decodes the reply as `Response`.
    /// Failing to encode the request or decode the reply is ``ExtensionError/coding(_:)``.
    public func send<Request: Encodable, Response: Decodable>(_ request: Request, expecting: Response.Type) async throws(ExtensionError) -> Response {
        let payload: [UInt8]
        do { payload = Array(try JSONEncoder().encode(request)) } catch { throw .coding("\(error)") }
        let reply = try await send(ExtensionMessage(payload))
        reply.closeFileDescriptors()
        do { return try JSONDecoder().decode(Response.self, from: Data(reply.payload)) } catch { throw .coding("\(error)") }
    }

    /// Returns once the send queue has room for a frame of `bytes` with `fds` descriptors (at
    /// once, usually); throws when the connection closes or the task is cancelled meanwhile.
    /// Not `cancellable`, it waits on whatever happens to the task (for an answer that must go out).
    func waitForRoom(bytes: Int, fds: Int, cancellable: Bool = true) async throws(ExtensionError) {
        while true {
            if try output.withLock({ output throws(ExtensionError) in try self.hasRoom(bytes: bytes, fds: fds, output) }) { return }
            let waiterID = nextRoomWaiter.add(1, ordering: .relaxed).oldValue
            try await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: RoomWaiter) in
                    let now: Result<Void, ExtensionError>? = output.withLock { output in
                        do throws(ExtensionError) {
                            if try hasRoom(bytes: bytes, fds: fds, output) { return .success(()) }
                        } catch {
                            return .failure(error)
                        }
                        if cancellable && Task.isCancelled { return .failure(.cancelled) }
                        output.roomWaiters[waiterID] = continuation
                        return nil
                    }
                    if let now { continuation.resume(returning: now) }
                }
            } onCancel: {
                guard cancellable else { return }
                output.withLock { $0.roomWaiters.removeValue(forKey: waiterID) }?.resume(returning: .failure(.cancelled))
            }.get()
        }
    }

    /// Under `output`: whether a frame of `bytes` with `fds` fits the send queue now; throws
    /// the connection's end when it is closed.
    func hasRoom(bytes: Int, fds: Int, _ output: Output) throws(ExtensionError) -> Bool {
        guard output.open else {
            throw state.withLock { $0.closedBecause } ?? .connectionClosed(detail: "the extension closed the connection")
        }
        let queuedBytes = output.sender.pendingOutputBytes, queuedFDs = output.sender.pendingOutputFDs
        if queuedBytes == 0 && queuedFDs == 0 { return true }
        return queuedBytes + bytes <= sendQueueLimit.bytes && queuedFDs + fds <= sendQueueLimit.fileDescriptors
    }

    /// Under `output`: the senders waiting for room, to be resumed (outside the lock) to look again.
    func takeRoomWaiters(_ output: inout Output) -> [RoomWaiter] {
        guard !output.roomWaiters.isEmpty else { return [] }
        defer { output.roomWaiters.removeAll() }
        return Array(output.roomWaiters.values)
    }

    /// Writes a frame (under `output`), taking its fds (closed once sent, or now on failure);
    /// watches writability when it could not be written at once.
    func write(_ frame: Frame, _ output: inout Output) -> ExtensionError? {
        guard output.open else {
            frame.closeFDs()
            return state.withLock { $0.closedBecause } ?? .connectionClosed(detail: "the extension closed the connection")
        }
        do {
            try output.sender.enqueue(frame)
        } catch .frameTooLarge(let length, let maximum) {
            // Checked before a byte was written: the connection carries on.
            return .messageTooLarge(size: Int(length), maximum: maximum)
        } catch {
            return .wire(error)
        }
        if output.sender.hasPendingOutput && !output.watchingWritability {
            output.watchingWritability = true
            updateWatch(output)
        }
        return nil
    }
}
