import ExtSandboxWire
import Glibc
import Synchronization

/// Why a request to the host failed.
public enum HostRequestError: Error, Sendable, CustomStringConvertible {
    /// The host answered with an ERROR: `code` 2 means it has no handler for requests.
    case remote(code: UInt32, message: String)
    /// The connection closed before the answer came.
    case connectionClosed
    /// The message is over the host's maximum frame size (or carries more than 16 fds): not sent.
    case messageTooLarge
    /// The calling task was cancelled (a CANCEL went to the host).
    case cancelled

    public var description: String {
        switch self {
        case .remote(let code, let message): "the host answered error \(code)" + (message.isEmpty ? "" : ": \(message)")
        case .connectionClosed: "the connection to the host closed"
        case .messageTooLarge: "the message is over the host's maximum frame size"
        case .cancelled: "the request was cancelled"
        }
    }
}

/// One connection to the host, from the extension's side.
///
/// The extension calls the object the host exports on the connection through a proxy typed by
/// their shared `@Resolvable` contract:
///
/// ```swift
/// guard let host = HostConnection.current else { return }
/// let notes = try host.remoteObject($HostNotes.self)
/// let answer = try await notes.note("started")
/// ```
///
/// The layer below: the extension's own requests and one-way messages in bytes (``send(_:)``,
/// ``sendOneWay(_:)``), which the host answers with its `ExtensionConnection.Handlers`.
///
/// Inside ``AppExtension/handle(request:)`` and ``AppExtension/handle(oneWay:)`` the connection
/// the message came in on is ``current``; ``AppExtension/connected(_:)`` hands each new one over
/// for later use.
public final class HostConnection: Sendable {
    /// The connection of the request or one-way message being handled (a task-local value).
    @TaskLocal public static var current: HostConnection?

    // The continuation carries the typed outcome: `withUnsafeThrowingContinuation` and
    // `withTaskCancellationHandler` would widen the error to `any Error`.
    private typealias Reply = UnsafeContinuation<Result<Message, HostRequestError>, Never>
    private struct State {
        var pending: [UInt64: Reply] = [:]
        /// Requests cancelled: a late answer to one of them is no protocol error.
        var cancelled: Set<UInt64> = []
        var nextID: UInt64 = 1
        var closed = false
    }

    private let state = Mutex(State())
    private let writer: ConnectionWriter
    /// The connection's distributed actor system (its calls travel on this connection).
    public let actorSystem = ExtensionActorSystem(side: .extension)
    /// What the extension serves on this connection (``AppExtension/exportedObject(_:)``):
    /// held here, the system holds it weakly.
    private let exported = Mutex<ExportedObject?>(nil)

    init(writer: ConnectionWriter) {
        self.writer = writer
        actorSystem.attach(self)
    }

    /// Serves `object` on this connection until it closes.
    func export(_ object: ExportedObject?) {
        guard let object else { return }
        exported.withLock { $0 = object }
        actorSystem.export(object)
    }

    /// Sends a request to the host and waits for its one answer. Cancelling the task sends a
    /// CANCEL and throws ``HostRequestError/cancelled`` at once.
    public func send(_ message: Message) async throws(HostRequestError) -> Message {
        try await send(message, payloadTail: [])
    }

    /// ``send(_:)`` of a request whose payload is `message`'s followed by `payloadTail`, each
    /// written from its own storage.
    func send(_ message: Message, payloadTail: [UInt8]) async throws(HostRequestError) -> Message {
        let id = state.withLock { state -> UInt64 in
            defer { state.nextID += 1 }
            return state.nextID
        }
        let outcome = await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: Reply) in
                let refused = state.withLock { state -> Bool in
                    guard !state.closed else { return true }
                    state.pending[id] = continuation
                    return false
                }
                if refused {
                    for descriptor in message.fileDescriptors { descriptor.close() }
                    continuation.resume(returning: .failure(.connectionClosed))
                    return
                }
                // The frame's fds are closed once sent (the caller's are sent, like a reply's).
                let failure: HostRequestError? = switch writer.write(.request(id: id, payload: message.payload, payloadTail: payloadTail, fds: message.fileDescriptors)) {
                case .sent: nil
                case .overTheHostsLimits: .messageTooLarge
                case .closed: .connectionClosed
                }
                if let failure { state.withLock { $0.pending.removeValue(forKey: id) }?.resume(returning: .failure(failure)) }
            }
        } onCancel: {
            let continuation = state.withLock { state -> Reply? in
                guard let continuation = state.pending.removeValue(forKey: id) else { return nil }
                state.cancelled.insert(id)
                return continuation
            }
            if let continuation {
                _ = writer.write(.cancel(id: id))
                continuation.resume(returning: .failure(.cancelled))
            }
        }
        return try outcome.get()
    }

    /// Sends a one-way message to the host (dropped there unless it has a handler for them).
    /// Throws ``HostRequestError/messageTooLarge`` or ``HostRequestError/connectionClosed``;
    /// nothing was sent then.
    public func sendOneWay(_ message: Message) throws(HostRequestError) {
        switch writer.write(.oneway(payload: message.payload, fds: message.fileDescriptors)) {
        case .sent: return
        case .overTheHostsLimits: throw HostRequestError.messageTooLarge
        case .closed: throw HostRequestError.connectionClosed
        }
    }

    /// A REPLY or ERROR from the host: resumes its request. False for an id never sent (a
    /// protocol error: the caller closes the connection).
    func answerArrived(_ frame: Frame) -> Bool {
        let (continuation, known) = state.withLock { state -> (Reply?, Bool) in
            if let continuation = state.pending.removeValue(forKey: frame.id) { return (continuation, true) }
            return (nil, state.cancelled.remove(frame.id) != nil)
        }
        guard let continuation else {
            frame.closeFDs()
            return known
        }
        if frame.kind == .reply {
            continuation.resume(returning: .success(Message(frame.payload, fileDescriptors: frame.fds)))
        } else {
            let payload = try? frame.errorPayload()
            continuation.resume(returning: .failure(.remote(code: payload?.code.rawValue ?? 0, message: payload?.message ?? "")))
        }
        return true
    }

    /// The connection ended: every request still waiting fails; the exported object is let go.
    func closed() {
        exported.withLock { $0 = nil }
        let waiting = state.withLock { state -> [Reply] in
            state.closed = true
            defer { state.pending.removeAll() }
            return Array(state.pending.values)
        }
        for continuation in waiting { continuation.resume(returning: .failure(.connectionClosed)) }
    }
}
