/// The kind of a frame: the first byte of its header.
public enum FrameKind: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Handshake, on every connection: the host sends it first, the extension answers with its own
    /// (accepted) or with an ``error`` (rejected). Payload: ``Hello``. Id 0, no fds.
    case hello = 1
    /// A request that expects exactly one ``reply`` or ``error``. Id: chosen by the sender, nonzero,
    /// unique among its outstanding requests. May carry fds.
    case request = 2
    /// The successful answer to a request. Id: the request's. May carry fds.
    case reply = 3
    /// The failed answer to a request (id: the request's), or a connection-level error (id 0).
    /// Payload: ``ErrorPayload``. No fds.
    case error = 4
    /// A message without an answer. Id 0. May carry fds.
    case oneway = 5
    /// Asks the peer to stop handling a request it received. Id: the request's. No payload
    /// semantics, no fds. The request is still answered (``error`` cancelled, or its ``reply``).
    case cancel = 6
    /// Orderly close: the sender sends nothing more and closes its end. Id 0, no fds.
    case goodbye = 7
    /// Control socket only, host → extension: a new connection. Id: the connection id (nonzero).
    /// Exactly one fd: the connection's socket.
    case connect = 8
    /// Control socket only, extension → host: the extension accepts connections now. Id 0, no fds.
    /// Payload: UTF-8 of the extension's identifier.
    case ready = 9

    public var description: String {
        switch self {
        case .hello: "HELLO"
        case .request: "REQUEST"
        case .reply: "REPLY"
        case .error: "ERROR"
        case .oneway: "ONEWAY"
        case .cancel: "CANCEL"
        case .goodbye: "GOODBYE"
        case .connect: "CONNECT"
        case .ready: "READY"
        }
    }

    /// Whether frames of this kind must have id 0 (`true`) or a nonzero id (`false`).
    /// ``error`` accepts both (0 is a connection-level error), so it is `nil` there.
    public var requiresZeroID: Bool? {
        switch self {
        case .hello, .oneway, .goodbye, .ready: true
        case .request, .reply, .cancel, .connect: false
        case .error: nil
        }
    }

    /// How many file descriptors a frame of this kind may carry.
    public var allowedFDCounts: ClosedRange<Int> {
        switch self {
        case .request, .reply, .oneway: 0...ExtSandboxWire.maximumFDsPerFrame
        case .connect: 1...1
        case .hello, .error, .cancel, .goodbye, .ready: 0...0
        }
    }
}
