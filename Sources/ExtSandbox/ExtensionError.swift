import Glibc
import ExtSandboxWire
import SandboxPolicy
import SandboxRuntime
import SandboxSystem

/// Why an extension operation failed.
public enum ExtensionError: Error, Sendable, CustomStringConvertible {
    /// The extension may not be launched, or its launch showed it is not what was discovered:
    /// not discovered in this process, refused (uninstalled, changed, unapproved, disabled, out
    /// of scope), a broken bundle or approvals file, or READY with another identifier. Nothing
    /// ran, or what ran is ended.
    case discovery(DiscoveryError)
    /// The synchronous `AppExtensionProcess(configuration:)` was called from a task off the main
    /// thread: blocking that thread, likely one of the cooperative pool's few, could starve the
    /// launch it waits for. From a task, use the asynchronous initializer.
    case blockingLaunchRefused
    /// The policy of the point's security level (`securityLevel`, a name or a path) could not
    /// be found, trusted, loaded or compiled: `error` names the file and line. Nothing ran.
    case policyFailed(securityLevel: String, error: PolicyError)
    /// The sandbox could not be set up, or the executable could not be read: the runtime's
    /// typed cause (the step, the `errno`). Nothing ran.
    case sandboxFailed(SandboxError)
    /// The extension exited before it said it was ready.
    case endedBeforeReady(Termination)
    /// The extension did not say it was ready in time.
    case notReadyInTime
    /// The extension refused the connection.
    case rejected(String)
    /// The host could not watch a socket of the extension's: its event monitor refused the
    /// registration (`epoll_ctl`), the runtime's typed cause (the step, the `errno`). Nothing
    /// more would have been read, so a connection is closed; at launch (the control socket, while
    /// waiting for READY) the sandbox is ended.
    case monitorFailed(SandboxError)
    /// The extension process ended unexpectedly; pending requests fail with this reason.
    case interrupted(Termination)
    /// The host invalidated the connection or the process.
    case invalidated
    /// The connection closed (the extension closed it, or its process ended: `detail` says).
    case connectionClosed(detail: String)
    /// The extension broke the wire protocol (docs/wire-protocol.md §9: on a connection, or on
    /// the control socket before READY), or the socket failed: the typed cause. The connection is closed; its pending requests failed
    /// with this error.
    case protocolError(WireError)
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
    /// ``ExtensionOutput/into(_:)`` could not copy the host's descriptor (`errno`: EBADF when it
    /// is not open, EMFILE when the host has no fd left).
    case outputUnusable(errorNumber: Int32)

    /// Text the extension chose (a rejection's or an error's message) is shown with its control
    /// characters escaped: hosts log these, and a terminal would act on them.
    public var description: String {
        switch self {
        case .discovery(let error): return "\(error)"
        case .blockingLaunchRefused:
            return "the synchronous AppExtensionProcess(configuration:) would block a task's thread: use `try await AppExtensionProcess(configuration:)` in a task"
        case .policyFailed(let level, let error):
            // A level given as a path is the file the error names already.
            return "the extension could not be launched: policy " + (error.file == level ? "" : "\(level): ") + "\(error)"
        case .sandboxFailed(let error): return "the extension could not be launched: \(error)"
        case .endedBeforeReady(let termination): return "the extension ended before it was ready: \(termination)"
        case .notReadyInTime: return "the extension did not become ready in time"
        case .rejected(let message): return "the extension rejected the connection" + (message.isEmpty ? "" : ": \(TerminalText.escaped(message))")
        case .monitorFailed(let error): return "the host cannot watch the connection: \(error)"
        case .interrupted(let termination): return "the extension was interrupted: \(termination)"
        case .invalidated: return "the connection was invalidated"
        case .connectionClosed(let detail): return "the connection closed: \(detail)"
        case .protocolError(let error): return "protocol error from the extension: \(error)"
        case .cancelled: return "the request was cancelled"
        case .messageTooLarge(let size, let maximum):
            return "the message is too large: a frame of \(size) bytes, the extension accepts at most \(maximum)"
        case .sendQueueFull(let bytes, let fds):
            return "the connection's send queue is full (at most \(bytes) bytes and \(fds) file descriptors wait for the extension to read)"
        case .remote(let code, let message): return "the extension answered error \(code)" + (message.isEmpty ? "" : ": \(TerminalText.escaped(message))")
        case .coding(let why): return "message coding failed: \(why)"
        case .outputUnusable(let errorNumber):
            return "the descriptor for the extension's output cannot be copied: \(String(cString: strerror(errorNumber)))"
        }
    }

    /// The typed error this one wraps, if any: the ``DiscoveryError`` that refused a launch, the
    /// `PolicyError` or `SandboxError` of a launch, the `SandboxError` of a connection's
    /// registration, the `WireError` of a connection.
    public var underlying: (any Error)? {
        switch self {
        case .discovery(let error): return error
        case .policyFailed(_, let error): return error
        case .sandboxFailed(let error), .monitorFailed(let error): return error
        case .protocolError(let error): return error
        default: return nil
        }
    }

    /// A failure on a connection's socket as the host reports it: the extension's close as
    /// ``connectionClosed(detail:)``, any other `WireError` typed (``protocolError(_:)``).
    static func wire(_ error: WireError) -> ExtensionError {
        error == .connectionClosed ? .connectionClosed(detail: "the extension closed the connection") : .protocolError(error)
    }

    /// A launch the runtime refused, as the host reports it: a policy that could not be
    /// compiled as ``policyFailed(securityLevel:error:)`` (as one that could not be loaded is),
    /// any other failure as ``sandboxFailed(_:)``.
    static func launch(_ error: SandboxError, securityLevel: String) -> ExtensionError {
        if error.step == .policy, let policyError = error.policyError {
            return .policyFailed(securityLevel: securityLevel, error: policyError)
        }
        return .sandboxFailed(error)
    }
}
