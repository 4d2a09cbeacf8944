import ExtSandboxWire
import SandboxSystem

/// Bytes and file descriptors, the unit of the extension channel.
public struct ExtensionMessage: Sendable, Hashable {
    public var payload: [UInt8]
    /// Descriptors that travel with the message (at most 16), owned: each is closed once, when
    /// the last holder lets it go (or on its `close()`); a copy of the message shares them.
    ///
    /// Sending one sends a copy (`dup`): the message's stay open. Received ones are held by the
    /// message: keep a `FileDescriptor` to keep its descriptor, `release()` it to hand the number
    /// to an owner of another kind; those nobody keeps are closed when the message goes, the way
    /// descriptors from an extension must be closed (see ``closeFileDescriptors()``).
    public var fileDescriptors: [FileDescriptor]

    public init(_ payload: [UInt8] = [], fileDescriptors: [FileDescriptor] = []) {
        self.payload = payload
        self.fileDescriptors = fileDescriptors
    }

    /// The numbers of ``fileDescriptors``, for system calls while the message holds them.
    public var fileDescriptorNumbers: [Int32] { fileDescriptors.map(\.rawValue) }

    /// Closes the message's descriptors now rather than when it goes (each once, whichever copy
    /// calls it). Received ones close without blocking the caller
    /// (`UntrustedDescriptors/close(_:)`: sockets made non-lingering, Unix sockets shut down and
    /// emptied, the closes on threads of their own): an extension can hand its host a descriptor
    /// whose plain `close(2)` blocks for minutes, as a TCP socket with `SO_LINGER` and unsent
    /// data, or a Unix socket with such sockets queued in it. Do not use a socket of theirs
    /// through a duplicate afterwards.
    public func closeFileDescriptors() {
        for descriptor in fileDescriptors { descriptor.close() }
    }

    // Equal messages carry the same descriptor numbers (descriptors are not values).
    public static func == (lhs: ExtensionMessage, rhs: ExtensionMessage) -> Bool {
        lhs.payload == rhs.payload && lhs.fileDescriptorNumbers == rhs.fileDescriptorNumbers
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(payload)
        hasher.combine(fileDescriptorNumbers)
    }
}
