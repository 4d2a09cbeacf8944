/// What carries a connection's distributed calls: the host's `ExtensionConnection`, the SDK's
/// `HostConnection`. A class, so that an actor system holds it weakly (a connection owns what
/// it serves, which owns its actor system).
public protocol CallTransport: AnyObject, Sendable {
    /// Sends a call envelope as a REQUEST with `fileDescriptors` (the transport owns them from
    /// now on, and closes them) and returns its answer, whose fds the caller owns. Throws the
    /// connection's own errors (closed, interrupted, cancelled, too large for the peer) unchanged.
    func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer
}
