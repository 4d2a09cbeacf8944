import ExtSandboxWire

/// Bytes and file descriptors, the unit of the extension channel.
public struct ExtensionMessage: Sendable, Hashable {
    public var payload: [UInt8]
    /// Descriptors that travel with the message (at most 16). Sent ones stay the sender's (they
    /// are duplicated); received ones belong to the receiver, who must close them: with
    /// ``closeFileDescriptors()`` (or keep them).
    public var fileDescriptors: [Int32]

    public init(_ payload: [UInt8] = [], fileDescriptors: [Int32] = []) {
        self.payload = payload
        self.fileDescriptors = fileDescriptors
    }

    /// Closes the message's descriptors the way descriptors from an extension must be closed:
    /// without blocking the caller (`UntrustedDescriptors/close(_:)`: sockets made
    /// non-lingering, Unix sockets shut down and emptied, the closes on threads of their own). An
    /// extension can hand its host a descriptor whose plain `close(2)` blocks for minutes: a TCP
    /// socket with `SO_LINGER` and unsent data, a Unix socket with such sockets queued in it. Call
    /// it once, when done with them: the numbers are not to be used afterwards, nor a socket of
    /// theirs through a duplicate.
    public func closeFileDescriptors() {
        UntrustedDescriptors.close(fileDescriptors)
    }
}
