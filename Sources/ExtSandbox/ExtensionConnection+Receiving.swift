import CSandboxSystem
import ExtSandboxWire
import FoundationEssentials
import Glibc
import SandboxRuntime
import SandboxSystem
import Synchronization

// The host's side of receiving: frames read on the monitor thread (or, for a quick reply, on the
// caller's), the answers they carry, and the extension's own requests and one-way messages.
extension ExtensionConnection {
    /// How long a caller looks for the reply it just asked for on its own thread before leaving
    /// it to the monitor thread. A quick reply then reaches the caller directly: no hop through
    /// the monitor thread, no wake-up of the caller's executor thread. The caller spins (polls
    /// without sleeping, yielding between polls): on a VM whose idle CPUs halt, waking a sleeping
    /// thread from another CPU costs more than the wait itself, and a timed sleep arms a timer
    /// (docs/performance.md, "The caller's spin for its reply"). Only a connection's sole
    /// outstanding request spins, and only one caller in the process at a time; after a look
    /// that ended without its reply the connection skips the next few, so a slow extension
    /// costs its callers at most this much CPU every few requests.
    static let callerWait: Duration = .microseconds(100)
    /// Waits skipped after one that timed out.
    static let waitsSkippedAfterTimeout = 8
    /// Callers waiting at once, in the whole process: one, so that many connections with one
    /// request each never hold several executor threads spinning together.
    static let maximumWaiters = 1
    static let waiters = Atomic<Int>(0)

    /// Under `output`, before request `id` is written: whether its caller will look for the reply
    /// itself (``readReplyBriefly(to:)``, which must then follow, written or not, unless
    /// ``releaseReplyReading(_:)`` gives the claim back). So it will if `id` is the connection's
    /// only pending request, no other caller in the process is looking, and the connection is
    /// not skipping waits. The monitor thread then stops watching the socket's readability
    /// before the request goes out: an extension on the same CPU answers before this thread
    /// runs again, and the monitor, woken by the answer, would read it first and wake this task's
    /// next thread besides. (It still sees a hang-up or an error: epoll always reports those.)
    func claimReplyReading(_ output: Output, to id: UInt64) -> Bool {
        guard Self.waiters.add(1, ordering: .relaxed).newValue <= Self.maximumWaiters else {
            Self.waiters.subtract(1, ordering: .relaxed)
            return false
        }
        let claimed = state.withLock { state -> Bool in
            guard state.open, Self.onlyPending(id, state) else { return false }
            guard state.waitsToSkip == 0 else {
                state.waitsToSkip -= 1
                return false
            }
            state.callerReading = true
            return true
        }
        if claimed {
            updateWatch(output)
        } else {
            Self.waiters.subtract(1, ordering: .relaxed)
        }
        return claimed
    }

    /// After ``claimReplyReading(_:to:)`` said yes: while request `id` is the only one pending,
    /// looks for up to ``callerWait`` for the socket to become readable and reads what arrived on
    /// this thread, resuming the continuations it answers (ours among them) directly; then hands
    /// the socket back to the monitor thread. `state` serializes reading in any case.
    func readReplyBriefly(to id: UInt64) {
        let looked = state.withLock { Self.onlyPending(id, $0) }
        let readable = looked ? spinUntilReadable(descriptor) : false
        Self.waiters.subtract(1, ordering: .relaxed)
        // Read before the monitor watches again: it would be woken for these bytes too.
        if readable { eventsArrived(EventMonitor.readable, until: id) }
        output.withLock { output in
            state.withLock { state in
                state.callerReading = false
                // Looked and still not answered (nothing came in time, or only other frames):
                // the next few are left to the monitor, whatever else the extension sent.
                if looked && state.pending[id] != nil { state.waitsToSkip = Self.waitsSkippedAfterTimeout }
            }
            updateWatch(output)
        }
    }

    /// Under `output`: gives back a claim whose request will not be answered soon (it is still
    /// queued behind others): the monitor watches the socket again.
    func releaseReplyReading(_ output: Output) {
        state.withLock { $0.callerReading = false }
        updateWatch(output)
        Self.waiters.subtract(1, ordering: .relaxed)
    }

    private static func onlyPending(_ id: UInt64, _ state: State) -> Bool {
        state.pending.count == 1 && state.pending[id] != nil
    }

    /// Looks for up to ``callerWait`` for `descriptor` to become readable, spinning: true when
    /// it is, false when it did not in time, nil (at once) when another caller in the process
    /// is looking.
    func waitBriefly(for descriptor: FileDescriptor) -> Bool? {
        guard Self.waiters.add(1, ordering: .relaxed).newValue <= Self.maximumWaiters else {
            Self.waiters.subtract(1, ordering: .relaxed)
            return nil
        }
        defer { Self.waiters.subtract(1, ordering: .relaxed) }
        return spinUntilReadable(descriptor)
    }

    private func spinUntilReadable(_ descriptor: FileDescriptor) -> Bool {
        let (seconds, attoseconds) = Self.callerWait.components
        return xsb_spin_until_readable(descriptor.rawValue, Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)) == 1
    }

    /// On the monitor thread (or a caller's, readable only): write what is queued, read what
    /// arrived, never block. Each frame is handled under the lock and its waiter resumed right
    /// after it, outside the lock.
    /// `until`: the request a caller reads for on its own thread; once that one is answered it
    /// only decodes what it has read already, and leaves what is still in the socket to the
    /// monitor (which is woken for it when it watches again): a flooding extension must not hold
    /// the caller.
    func eventsArrived(_ events: UInt32, until request: UInt64? = nil) {
        if events & EventMonitor.writable != 0 {
            var roomWaiters: [RoomWaiter] = []
            let failure: ExtensionError? = output.withLock { output in
                guard output.open else { return nil }
                do throws(WireError) {
                    if try output.sender.flush(), output.watchingWritability {
                        output.watchingWritability = false
                        updateWatch(output)
                    }
                    roomWaiters = takeRoomWaiters(&output)
                    return nil
                } catch {
                    return .wire(error)
                }
            }
            for waiter in roomWaiters { waiter.resume(returning: .success(())) }
            if let failure {
                close(because: failure)
                return
            }
        }
        guard events & (EventMonitor.readable | EventMonitor.hangUp | EventMonitor.error) != 0 else { return }
        // A peer that hung up can send nothing more: what it left in the socket is read even while
        // reading is paused (and must be: epoll reports the hang-up until then).
        let hungUp = events & (EventMonitor.hangUp | EventMonitor.error) != 0
        while true {
            var answer: Answer?
            var closeReason: ExtensionError?
            var peerClosed = false
            var pausedNow = false
            /// A frame to write back (ERROR id 0 for a bad HELLO, before closing).
            var farewell: Frame?
            let more = state.withLock { state -> Bool in
                guard state.open, !state.readingPaused || hungUp else { return false }
                do throws(WireError) {
                    // Once the caller's own reply is in, it decodes only what it has read already.
                    let answered = request.map { state.pending[$0] == nil } ?? false
                    switch try answered ? state.receiver.receiveBuffered() : state.receiver.receiveNext(wait: false) {
                    case .wouldBlock:
                        return false
                    case .closed:
                        peerClosed = true
                        closeReason = .connectionClosed(detail: "the extension closed the connection")
                    case .frame(let frame):
                        closeReason = handle(frame, state: &state, answer: &answer, farewell: &farewell)
                        if closeReason == nil && !state.readingPaused && outstandingIncoming(state) >= maximumOutstandingIncoming {
                            state.readingPaused = true
                            pausedNow = true
                        }
                    }
                } catch {
                    closeReason = .wire(error)
                }
                return closeReason == nil
            }
            if pausedNow { output.withLock { updateWatch($0) } }
            if let farewell {
                // Written like any frame (a bad HELLO's ERROR 4 goes out before the close, §5),
                // and before the answer: the handshake's waiter closes the connection as soon as
                // it runs, which on another CPU can be at once (the extension then read only the
                // end of the connection, never the ERROR).
                let failure = output.withLock { write(farewell, &$0) }
                if let failure, closeReason == nil { closeReason = failure }
            }
            switch answer {
            case .reply(let continuation, let result): continuation.resume(returning: result)
            case .handshake(let continuation, let result): continuation.resume(returning: result)
            case nil: break
            }
            if let closeReason {
                if peerClosed && state.withLock({ !$0.pending.isEmpty || $0.handshake != nil }) {
                    // An extension that dies closes its sockets a moment before its exit is known:
                    // give the process's end a while to fail the requests (or the handshake) with
                    // the real reason; it closes the connection at once when it comes. A program
                    // the kernel marks as exiting gets as long as its end takes (under load,
                    // seconds); one that still runs, the grace for an exit that follows a close.
                    releaseSocket()
                    let wait = ExtensionProcessCore.waitForEndAfterHangUp(programLiveness())
                    Task.detached { [weak self] in
                        try? await Task.sleep(for: wait)
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
    enum Answer {
        case reply(Reply, Result<ExtensionMessage, ExtensionError>)
        case handshake(Handshake, Result<UInt32, ExtensionError>)
    }

    func handle(_ frame: Frame, state: inout State, answer: inout Answer?, farewell: inout Frame?) -> ExtensionError? {
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
                    // A malformed HELLO or another version: ERROR id 0 code 4 before the close (§5.3).
                    farewell = .error(id: 0, code: .protocolError, message: "\(error)")
                    let reason = ExtensionError.wire(error)
                    answer = .handshake(handshake, .failure(reason))
                    return reason
                }
            case .error:
                let message = (try? frame.errorPayload().message) ?? ""
                answer = .handshake(handshake, .failure(ExtensionError.rejected(message)))
                return .rejected(message)
            default:
                UntrustedDescriptors.close(frame.fds)
                let reason = ExtensionError.protocolError(.unexpectedFrame(kind: frame.kind, reason: "the handshake expects HELLO"))
                answer = .handshake(handshake, .failure(reason))
                return reason
            }
        }
        switch frame.kind {
        case .reply, .error:
            guard let continuation = state.pending.removeValue(forKey: frame.id) else {
                UntrustedDescriptors.close(frame.fds)
                // A late answer to a request we cancelled is fine; any other is a broken peer.
                if state.cancelled.remove(frame.id) != nil { return nil }
                return .protocolError(.unknownRequestID(kind: frame.kind, id: frame.id))
            }
            if state.invalidating {
                // Given up by the host: the extension's answer to our GOODBYE (ERROR 3) included.
                UntrustedDescriptors.close(frame.fds)
                answer = .reply(continuation, .failure(ExtensionError.invalidated))
            } else if frame.kind == .reply {
                answer = .reply(continuation, .success(ExtensionMessage(frame.payload, fileDescriptors: frame.fds)))
            } else {
                let payload = try? frame.errorPayload()
                answer = .reply(continuation, .failure(ExtensionError.remote(code: payload?.code.rawValue ?? 0, message: payload?.message ?? "")))
            }
            return nil
        case .request:
            let id = frame.id
            guard state.incoming[id] == nil else {
                UntrustedDescriptors.close(frame.fds)
                return .protocolError(.unexpectedFrame(kind: .request, reason: "request id \(id) reused while it was outstanding"))
            }
            guard let onRequest = handlers.onRequest else {
                UntrustedDescriptors.close(frame.fds)
                // Answered like any request: counted, and written within the send queue's bounds.
                state.incoming[id] = Task.detached { [weak self] in
                    await self?.answer(id, with: .error(id: id, code: .unknownRequest, message: "the host has no handler for requests"))
                }
                return nil
            }
            let message = ExtensionMessage(frame.payload, fileDescriptors: frame.fds)
            // Detached: a frame may be read on a caller's thread (``readReplyBriefly(to:)``), and
            // the extension's request must not run with that caller's task-local values or priority.
            state.incoming[id] = Task.detached { [weak self] in
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
                await self?.answer(id, with: answer)
            }
            return nil
        case .oneway:
            let message = ExtensionMessage(frame.payload, fileDescriptors: frame.fds)
            // Without a handler it is dropped (§3); with one, handled in order.
            guard let onOneWay = handlers.onOneWay else {
                UntrustedDescriptors.close(frame.fds)
                return nil
            }
            let previous = state.lastOneWay
            state.oneWaysUnhandled += 1
            state.lastOneWay = Task.detached { [weak self] in
                await previous?.value
                await onOneWay(message)
                self?.oneWayHandled()
            }
            return nil
        case .cancel:
            // Unknown ids raced with their answer: ignored (§3).
            state.incoming[frame.id]?.cancel()
            return nil
        case .goodbye:
            return .connectionClosed(detail: "the extension said goodbye")
        default:
            UntrustedDescriptors.close(frame.fds)
            return .protocolError(.unexpectedFrame(kind: frame.kind, reason: "not allowed on a connection"))
        }
    }

    /// Sends a handler's answer to the extension's request `id` (exactly one: its task is
    /// removed as it is written). While the send queue is full (the extension does not read its
    /// answers) it waits for room, the request still outstanding: so the extension's requests are
    /// not read either (``Handlers/maximumOutstandingMessages``). A reply over the extension's
    /// maximum frame size becomes ERROR 6, and the connection carries on. Nothing is sent once the
    /// connection has closed.
    func answer(_ id: UInt64, with frame: Frame) async {
        // Not cancellable: a CANCEL that comes meanwhile is answered by this very answer (§3).
        let room: Void? = try? await waitForRoom(bytes: FrameHeader.encodedSize + frame.payload.count, fds: frame.fds.count,
                                                 cancellable: false)
        let (outstanding, resume) = state.withLock { state -> (Bool, Bool) in
            guard room != nil, state.incoming.removeValue(forKey: id) != nil else { return (false, false) }
            return (true, resumesReading(&state))
        }
        guard outstanding else {
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
        if resume { resumeReading() }
    }

    // MARK: The bound on the extension's requests and one-way messages

    /// Under `state`: the extension's requests not answered yet (their answer neither written nor
    /// queued) and its one-way messages whose handler has not returned.
    func outstandingIncoming(_ state: State) -> Int { state.incoming.count + state.oneWaysUnhandled }

    /// A one-way message's handler returned.
    func oneWayHandled() {
        let resume = state.withLock { state in
            state.oneWaysUnhandled -= 1
            return resumesReading(&state)
        }
        if resume { resumeReading() }
    }

    /// Under `state`, once an outstanding request or one-way message is done: whether reading,
    /// paused at the limit, resumes now (the caller then calls ``resumeReading()``).
    func resumesReading(_ state: inout State) -> Bool {
        guard state.readingPaused, state.open, outstandingIncoming(state) < maximumOutstandingIncoming else { return false }
        state.readingPaused = false
        return true
    }

    /// Watches the socket for readability again and reads what waits, on this thread: frames read
    /// before the pause may wait in the receiver's buffer, which epoll does not see.
    func resumeReading() {
        output.withLock { updateWatch($0) }
        eventsArrived(EventMonitor.readable)
    }

    /// Under `output`: tells the monitor what to watch the socket for: readability unless reading
    /// is paused or a caller reads its reply itself, writability while frames wait to be written.
    /// Every change of any of them is followed by a call, each under `output`: the last one sees all.
    func updateWatch(_ output: Output) {
        guard output.open else { return }
        let unwatched = state.withLock { $0.readingPaused || $0.callerReading }
        monitor.modify(fd: descriptor, token: token.load(ordering: .relaxed),
                       events: (unwatched ? 0 : EventMonitor.readable) | (output.watchingWritability ? EventMonitor.writable : 0))
    }
}
