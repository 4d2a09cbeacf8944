#if canImport(Glibc)
import Glibc
#endif

/// Everything that can go wrong on the wire. Each case carries the data needed to explain it.
///
/// Apart from ``systemCall(_:errno:)`` and ``peerError(code:message:)``, every case is a protocol
/// violation by the peer (or, from ``FrameEncoder``, by the caller): the endpoint closes that
/// connection. Errors thrown by ``FrameDecoder`` and ``FrameSocket`` have already closed every file
/// descriptor the decoder held.
public enum WireError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The length field (header plus payload) exceeds the receiver's maximum frame size. Raised as
    /// soon as the 4 length bytes are known, before anything of the payload is buffered.
    case frameTooLarge(length: UInt64, maximum: UInt32)
    /// The length field is smaller than the 16-byte header.
    case frameTooShort(length: UInt32)
    /// End of stream in the middle of a frame: `received` bytes of a frame of `expected` bytes
    /// (length prefix included; `expected` is 20 while the header itself is incomplete).
    case truncatedFrame(received: Int, expected: Int)
    /// The kind byte is not one of ``FrameKind``.
    case unknownKind(UInt8)
    /// The flags byte has bits this version does not define (all of them, for now).
    case unknownFlags(kind: FrameKind, flags: UInt8)
    /// The reserved header field is not zero.
    case nonzeroReserved(kind: FrameKind, value: UInt32)
    /// The id is not allowed for this kind (0 where a request id is required, or nonzero where 0 is).
    case invalidID(kind: FrameKind, id: UInt64)
    /// The frame declares (or carries) more than ``ExtSandboxWire/maximumFDsPerFrame`` fds.
    case tooManyFDs(kind: FrameKind, count: Int, maximum: Int)
    /// The frame declares a number of fds its kind does not allow (e.g. an fd on a HELLO, or a
    /// CONNECT without exactly one).
    case invalidFDCount(kind: FrameKind, count: Int, allowed: ClosedRange<Int>)
    /// The frame declares `declared` fds but `received` arrived with its first byte.
    case fdCountMismatch(kind: FrameKind, id: UInt64, declared: Int, received: Int)
    /// File descriptors arrived that no frame declares (or more than a frame may carry: the
    /// receiver has room for every fd one message can bring).
    case unexpectedFDs(count: Int)
    /// The kernel truncated the ancillary data (`MSG_CTRUNC`): the receiver is out of
    /// descriptors. The ones that did arrive were closed.
    case controlDataTruncated
    /// The payload does not have the layout its kind requires.
    case malformedPayload(kind: FrameKind, reason: String)
    /// The peer's HELLO has a protocol version this side does not speak.
    case unsupportedVersion(UInt16, supported: UInt16)
    /// A REPLY, ERROR or CANCEL names a request id the receiver does not know (endpoint logic).
    case unknownRequestID(kind: FrameKind, id: UInt64)
    /// A well-formed frame that is not allowed at this point of the conversation (endpoint logic:
    /// e.g. a REQUEST before the handshake, a CONNECT on a connection socket).
    case unexpectedFrame(kind: FrameKind, reason: String)
    /// The peer answered with an ERROR frame with id 0 (e.g. rejected the connection in the
    /// handshake: code 1).
    case peerError(code: ErrorCode, message: String)
    /// The peer closed the connection (end of stream at a frame boundary, `EPIPE`, `ECONNRESET`)
    /// where a frame was still required, or after this side already closed the socket.
    case connectionClosed
    /// A system call failed with `errno`.
    case systemCall(_ name: String, errno: Int32)

    public var description: String {
        switch self {
        case let .frameTooLarge(length, maximum):
            "frame too large: length \(length) exceeds the maximum frame size \(maximum)"
        case let .frameTooShort(length):
            "frame too short: length \(length) is less than the \(ExtSandboxWire.headerSize)-byte header"
        case let .truncatedFrame(received, expected):
            "truncated frame: end of stream after \(received) of \(expected) bytes"
        case let .unknownKind(kind):
            "unknown frame kind \(kind)"
        case let .unknownFlags(kind, flags):
            "unknown flags 0x\(String(flags, radix: 16)) on a \(kind) frame"
        case let .nonzeroReserved(kind, value):
            "reserved header field is 0x\(String(value, radix: 16)), not 0, on a \(kind) frame"
        case let .invalidID(kind, id):
            id == 0 ? "a \(kind) frame needs a nonzero id" : "a \(kind) frame must have id 0, not \(id)"
        case let .tooManyFDs(kind, count, maximum):
            "a \(kind) frame with \(count) file descriptors; at most \(maximum) are allowed"
        case let .invalidFDCount(kind, count, allowed):
            allowed.lowerBound == allowed.upperBound
                ? "a \(kind) frame must carry \(allowed.lowerBound) file descriptor\(allowed.lowerBound == 1 ? "" : "s"), not \(count)"
                : "a \(kind) frame may carry \(allowed.lowerBound)–\(allowed.upperBound) file descriptors, not \(count)"
        case let .fdCountMismatch(kind, id, declared, received):
            "\(kind) frame (id \(id)) declares \(declared) file descriptors but \(received) arrived with it"
        case let .unexpectedFDs(count):
            "\(count) file descriptor\(count == 1 ? "" : "s") arrived that no frame declares"
        case .controlDataTruncated:
            "ancillary data truncated (MSG_CTRUNC): the receiver is out of descriptors"
        case let .malformedPayload(kind, reason):
            "malformed \(kind) payload: \(reason)"
        case let .unsupportedVersion(version, supported):
            "unsupported protocol version \(version) (this side speaks \(supported))"
        case let .unknownRequestID(kind, id):
            "\(kind) for unknown request id \(id)"
        case let .unexpectedFrame(kind, reason):
            "unexpected \(kind) frame: \(reason)"
        case let .peerError(code, message):
            message.isEmpty ? "peer error \(code)" : "peer error \(code): \(message)"
        case .connectionClosed:
            "connection closed"
        case let .systemCall(name, errno):
            "\(name) failed: \(String(cString: strerror(errno))) (errno \(errno))"
        }
    }

    /// The ``ErrorCode`` to report to the peer (in an ERROR frame with id 0) before closing, for
    /// errors that are the peer's fault.
    public var errorCode: ErrorCode {
        switch self {
        case .frameTooLarge: .tooLarge
        case .systemCall, .connectionClosed: .internalError
        case .peerError(let code, _): code
        default: .protocolError
        }
    }
}
