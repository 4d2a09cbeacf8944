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
        case .remote(let code, let message): return "the extension answered error \(code)" + (message.isEmpty ? "" : ": \(message)")
        case .coding(let why): return "message coding failed: \(why)"
        }
    }
}
