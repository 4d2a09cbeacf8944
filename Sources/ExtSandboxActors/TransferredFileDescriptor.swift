import Glibc
import Synchronization

/// A file descriptor as an argument or result of a distributed method: it travels as
/// `SCM_RIGHTS` with the call's frame, never through the encoder (docs/wire-protocol.md §12.2,
/// tag 10).
///
/// It owns its descriptor and closes it when released (or on ``close()``); ``take()`` hands it
/// over. Sending one sends a copy: the sender's stays open until it is released.
public final class TransferredFileDescriptor: Codable, Sendable, CustomStringConvertible {
    private let descriptor: Mutex<Int32>

    /// Owns `descriptor` from now on.
    public init(taking descriptor: Int32) {
        self.descriptor = Mutex(descriptor)
    }

    /// Owns a copy of `descriptor` (close-on-exec); the caller keeps its own.
    public convenience init(duplicating descriptor: Int32) throws {
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { throw DistributedCallError.notSent("descriptor \(descriptor) cannot be copied: errno \(errno)") }
        self.init(taking: copy)
    }

    /// The descriptor, while this object owns it.
    public var rawValue: Int32? {
        let value = descriptor.withLock { $0 }
        return value >= 0 ? value : nil
    }

    /// Hands the descriptor over: the caller closes it. Nil if it was taken or closed already.
    public func take() -> Int32? {
        let value = descriptor.withLock { descriptor in
            defer { descriptor = -1 }
            return descriptor
        }
        return value >= 0 ? value : nil
    }

    /// Closes the descriptor now (once).
    public func close() {
        if let value = take() { _ = Glibc.close(value) }
    }

    deinit { close() }

    public var description: String { "fd \(rawValue.map(String.init) ?? "closed")" }

    /// Only the encoder of distributed calls can carry one (it attaches a copy to the frame).
    public func encode(to encoder: any Encoder) throws {
        throw EncodingError.invalidValue(self, .init(codingPath: encoder.codingPath, debugDescription: "a file descriptor travels only in distributed calls"))
    }

    /// Only the decoder of distributed calls can make one (from a received descriptor).
    public init(from decoder: any Decoder) throws {
        throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a file descriptor travels only in distributed calls"))
    }
}

/// The descriptors of one message being encoded or decoded: tag 10 values are indexes into it.
final class DescriptorTable {
    /// Copies made for sending, owned until handed to the transport.
    private(set) var outgoing: [Int32] = []
    /// Received, owned until a decoded value takes them; the rest are closed by ``closeUntaken()``.
    private var incoming: [Int32?]

    init(received: [Int32] = []) {
        incoming = received.map { $0 }
    }

    deinit {
        closeUntaken()
        closeOutgoing()
    }

    /// Attaches a copy of `descriptor`: its index in the message.
    func attach(_ descriptor: TransferredFileDescriptor) throws -> UInt16 {
        guard outgoing.count < 16 else { throw DistributedCallError.notSent("more than 16 file descriptors in one message") }
        guard let value = descriptor.rawValue else { throw DistributedCallError.notSent("a file descriptor argument was closed or taken") }
        let copy = fcntl(value, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { throw DistributedCallError.notSent("descriptor \(value) cannot be copied: errno \(errno)") }
        outgoing.append(copy)
        return UInt16(outgoing.count - 1)
    }

    /// The copies to send; the transport owns them from now on.
    func handOver() -> [Int32] {
        defer { outgoing = [] }
        return outgoing
    }

    func closeOutgoing() {
        for descriptor in handOver() { _ = Glibc.close(descriptor) }
    }

    /// The received descriptor at `index`, once.
    func take(_ index: UInt16) throws -> TransferredFileDescriptor {
        let position = Int(index)
        guard position < incoming.count, let descriptor = incoming[position] else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: position < incoming.count
                ? "file descriptor \(index) used twice" : "file descriptor \(index) of \(incoming.count) received"))
        }
        incoming[position] = nil
        return TransferredFileDescriptor(taking: descriptor)
    }

    func closeUntaken() {
        for case let descriptor? in incoming { _ = Glibc.close(descriptor) }
        incoming = incoming.map { _ in nil }
    }
}
