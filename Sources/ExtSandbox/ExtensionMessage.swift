/// Bytes and file descriptors, the unit of the extension channel.
public struct ExtensionMessage: Sendable, Hashable {
    public var payload: [UInt8]
    /// Descriptors that travel with the message (at most 16). Sent ones stay the sender's (they
    /// are duplicated); received ones belong to the receiver, who must close them.
    public var fileDescriptors: [Int32]

    public init(_ payload: [UInt8] = [], fileDescriptors: [Int32] = []) {
        self.payload = payload
        self.fileDescriptors = fileDescriptors
    }
}
