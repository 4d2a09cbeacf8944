/// What the callee's side sends back for one call envelope: the REPLY's payload and fds, or the
/// ERROR's code and message (docs/wire-protocol.md §12).
public enum CallAnswer: Sendable, Hashable {
    /// The encoded result (a value, docs/wire-protocol.md §12.2), empty for a method that returns
    /// nothing, and the result's file descriptors (owned by whoever holds the answer).
    case reply([UInt8], fileDescriptors: [Int32])
    /// An ERROR answer.
    case error(code: UInt32, message: String)
}

/// The ERROR codes of distributed calls (in the range the frame protocol keeps for its own use,
/// so that no application code collides with them).
public enum CallErrorCode {
    /// The envelope could not be read.
    public static let malformedEnvelope: UInt32 = 20
    /// No exported object by the envelope's target name.
    public static let unknownTarget: UInt32 = 21
    /// The target does not implement the method identifier.
    public static let unknownMethod: UInt32 = 22
    /// The arguments did not decode as the method's parameters (or were too few or too many).
    public static let undecodableArguments: UInt32 = 23
    /// The method threw a registered `Codable` error: the message is its registered name, a
    /// line feed, and the error's encoded value in lowercase hexadecimal.
    public static let registeredError: UInt32 = 24
    /// The method threw another error: the message describes it.
    public static let thrownError: UInt32 = 25
}

/// An error that already carries a wire code and message (the SDK's and the host's
/// `ExtensionFailure`): thrown by a distributed method, it is answered with exactly those.
public protocol CodedCallError: Error {
    var code: UInt32 { get }
    var message: String { get }
}
