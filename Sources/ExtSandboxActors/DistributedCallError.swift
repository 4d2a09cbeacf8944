/// Why a distributed call failed on the callee's side, as the caller sees it. (The
/// connection's own failures, such as the process ending mid-call, are thrown as the connection
/// throws them; a registered `Codable` error comes back as itself.)
public enum DistributedCallError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The callee could not read the call envelope (a version it does not know, a bound).
    case malformedEnvelope(String)
    /// The callee exports no object by that name on this connection (the callee's message).
    case unknownTarget(String)
    /// The callee's object does not implement the method (version skew).
    case unknownMethod(String)
    /// The callee could not decode the arguments as the method's parameters.
    case undecodableArguments(String)
    /// The callee's method threw: a registered error's answer that did not decode, an
    /// unregistered error (code 25), or an error with the application's own code (100 and
    /// above), with its message.
    case remote(code: UInt32, message: String)
    /// The peer serves no objects on this connection (it answered ERROR 2).
    case notServed
    /// The result did not decode as the method's return type.
    case malformedResult(String)
    /// The call could not be made: a generic method, an argument that does not encode, a
    /// call larger than the peer accepts, or a connection the system is no longer attached to.
    case notSent(String)

    public var description: String {
        switch self {
        case .malformedEnvelope(let why): "the peer could not read the call: \(why)"
        case .unknownTarget(let why): "the peer has no such object: \(why)"
        case .unknownMethod(let why): "the peer does not implement the method: \(why)"
        case .undecodableArguments(let why): "the peer could not decode the arguments: \(why)"
        case .remote(let code, let message): "the remote method failed with error \(code)" + (message.isEmpty ? "" : ": \(message)")
        case .notServed: "the peer serves no objects on this connection"
        case .malformedResult(let why): "the result did not decode: \(why)"
        case .notSent(let why): "the call was not sent: \(why)"
        }
    }

    /// The caller's error for an ERROR answer to a call.
    static func answered(code: UInt32, message: String) -> any Error {
        switch code {
        case 2: return DistributedCallError.notServed
        case CallErrorCode.malformedEnvelope: return DistributedCallError.malformedEnvelope(message)
        case CallErrorCode.unknownTarget: return DistributedCallError.unknownTarget(message)
        case CallErrorCode.unknownMethod: return DistributedCallError.unknownMethod(message)
        case CallErrorCode.undecodableArguments: return DistributedCallError.undecodableArguments(message)
        case CallErrorCode.registeredError:
            return RemoteErrorRegistry.shared.decode(message) ?? DistributedCallError.remote(code: code, message: message)
        default: return DistributedCallError.remote(code: code, message: message)
        }
    }
}
