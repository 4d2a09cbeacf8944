import ExtSandboxWire
import SandboxRuntime

/// Why an extension operation failed.
public enum ExtensionError: Error, Sendable, CustomStringConvertible {
    /// The sandbox could not be set up, or the policy not loaded; nothing ran.
    case launchFailed(String)
    /// The extension exited before it said it was ready.
    case endedBeforeReady(Termination)
    /// The extension did not say it was ready in time.
    case notReadyInTime
    /// The extension refused the connection.
    case rejected(String)
    /// The extension process ended unexpectedly; pending requests fail with this reason.
    case interrupted(Termination)
    /// The host invalidated the connection or the process.
    case invalidated
    /// The connection closed (the extension closed it, or broke the protocol: `detail` says).
    case connectionClosed(detail: String)
    /// The request's task was cancelled.
    case cancelled
    /// The message's frame is larger than the extension's maximum frame size (from its HELLO):
    /// `size` is the frame's length field (16 header bytes plus the payload), as the maximum is.
    /// Nothing was sent; the connection stays open.
    case messageTooLarge(size: Int, maximum: UInt32)
    /// `sendOneWay` found the connection's send queue full (the extension is not reading fast
    /// enough): `bytes` and `fileDescriptors` are the queue's bounds. Nothing was sent.
    case sendQueueFull(bytes: Int, fileDescriptors: Int)
    /// The extension answered with an error.
    case remote(code: UInt32, message: String)
    /// Encoding or decoding a Codable message failed.
    case coding(String)

    public var description: String {
        switch self {
        case .launchFailed(let why): return "the extension could not be launched: \(why)"
        case .endedBeforeReady(let termination): return "the extension ended before it was ready: \(termination)"
        case .notReadyInTime: return "the extension did not become ready in time"
        case .rejected(let message): return "the extension rejected the connection" + (message.isEmpty ? "" : ": \(message)")
        case .interrupted(let termination): return "the extension was interrupted: \(termination)"
        case .invalidated: return "the connection was invalidated"
        case .connectionClosed(let detail): return "the connection closed: \(detail)"
        case .cancelled: return "the request was cancelled"
        case .messageTooLarge(let size, let maximum):
            return "the message is too large: a frame of \(size) bytes, the extension accepts at most \(maximum)"
        case .sendQueueFull(let bytes, let fds):
            return "the connection's send queue is full (at most \(bytes) bytes and \(fds) file descriptors wait for the extension to read)"
        case .remote(let code, let message): return "the extension answered error \(code)" + (message.isEmpty ? "" : ": \(message)")
        case .coding(let why): return "message coding failed: \(why)"
        }
    }
}
