/// What carries a connection's distributed calls: the host's `ExtensionConnection`, the SDK's
/// `HostConnection`. A class, so that an actor system holds it weakly (a connection owns what
/// it serves, which owns its actor system).
public protocol CallTransport: AnyObject, Sendable {
    /// Sends a call envelope as a REQUEST with `fileDescriptors` (the transport owns them from
    /// now on, and closes them) and returns its answer, whose fds the caller owns. Throws the
    /// connection's own errors (closed, interrupted, cancelled, too large for the peer) unchanged.
    func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer

    /// Sends a call whose envelope is `envelope` followed by `tail` (a large byte-array argument,
    /// sent from its own storage rather than copied after the rest), otherwise as
    /// ``call(_:fileDescriptors:)``. The default concatenates the two.
    func call(_ envelope: [UInt8], followedBy tail: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer
}

extension CallTransport {
    /// Concatenates `envelope` and `tail` and sends them with ``call(_:fileDescriptors:)``.
    public func call(_ envelope: [UInt8], followedBy tail: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer {
        try await call(tail.isEmpty ? envelope : envelope + tail, fileDescriptors: fileDescriptors)
    }
}
