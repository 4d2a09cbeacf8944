import Distributed
@testable import ExtSandboxActors
import Synchronization
import Testing

final class AddressRecorder: Sendable {
    let addresses = Mutex<[UInt?]>([])
}

/// Records where its argument's bytes are.
distributed actor AddressRecordingSink: ByteSink {
    let recorder: AddressRecorder
    init(recorder: AddressRecorder, actorSystem: ExtensionActorSystem) {
        self.recorder = recorder
        self.actorSystem = actorSystem
    }

    distributed func take(_ label: String, _ bytes: [UInt8]) -> Int {
        recorder.addresses.withLock { $0.append(Self.address(of: bytes)) }
        return label.utf8.count + ChecksummingSink.checksum(bytes)
    }
    distributed func takeFirst(_ bytes: [UInt8], _ label: String) -> Int { label.utf8.count + ChecksummingSink.checksum(bytes) }
    nonisolated static func address(of bytes: [UInt8]) -> UInt? { bytes.withUnsafeBytes { $0.baseAddress.map { UInt(bitPattern: $0) } } }
}

/// A loopback transport that delivers a call as a receiver that splits payloads does: the bytes
/// copied into fresh arrays (as if read from a socket), the last argument's apart when
/// ``CallEnvelope/trailingByteCount(payloadCount:prefix:)`` says so.
final class SplittingLoopback: CallTransport {
    let peer: ExtensionActorSystem
    /// The address of each tail delivered apart.
    let tails = Mutex<[UInt?]>([])
    init(peer: ExtensionActorSystem) { self.peer = peer }

    func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer {
        try await call(envelope, followedBy: [], fileDescriptors: fileDescriptors)
    }

    func call(_ envelope: [UInt8], followedBy tail: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer {
        let payload = envelope + tail
        let split = payload.withUnsafeBytes { CallEnvelope.trailingByteCount(payloadCount: payload.count, prefix: $0) }
        let head = Array(payload.prefix(payload.count - split)), received = Array(payload.suffix(split))
        tails.withLock { $0.append(split == 0 ? nil : AddressRecordingSink.address(of: received)) }
        return await peer.serve(head, followedBy: received, fileDescriptors: fileDescriptors)
    }
}

@Suite("A large byte-array argument received apart is the method's, not copied")
struct ReceivedTailTests {
    static let bytes = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 9) }

    @Test("the method's [UInt8] is the array the receiver read the bytes into; small arguments and results are exact")
    func methodGetsTheReceivedArray() async throws {
        let host = ExtensionActorSystem(side: .host), ext = ExtensionActorSystem(side: .extension)
        let transport = SplittingLoopback(peer: ext)
        host.attach(transport)
        let recorder = AddressRecorder()
        let served = AddressRecordingSink(recorder: recorder, actorSystem: ext)
        ext.export(ExportedObject(served, as: $ByteSink.self))
        let sink = try host.remoteObject($ByteSink.self)
        let small = [UInt8](repeating: 3, count: 100)
        #expect(try await sink.take("label", Self.bytes) == 5 + ChecksummingSink.checksum(Self.bytes))
        #expect(try await sink.take("", small) == ChecksummingSink.checksum(small))
        #expect(try await sink.takeFirst(Self.bytes, "x") == 1 + ChecksummingSink.checksum(Self.bytes))
        let tails = transport.tails.withLock { $0 }
        #expect(tails.count == 3)
        #expect(tails[0] != nil && tails.dropFirst().allSatisfy { $0 == nil })
        withExtendedLifetime(served) {}
        let addresses = recorder.addresses.withLock { $0 }
        #expect(addresses.count == 2)
        #expect(addresses.first == tails.first)
    }

    static func envelope(_ arguments: [[UInt8]]) throws -> [UInt8] {
        try CallEnvelope(target: "extension", method: "m", arguments: arguments.map { $0[...] }).encoded()
    }

    static func split(_ payload: [UInt8], prefix: Int? = nil) -> Int {
        payload.withUnsafeBytes {
            CallEnvelope.trailingByteCount(payloadCount: payload.count, prefix: UnsafeRawBufferPointer(rebasing: $0.prefix(prefix ?? payload.count)))
        }
    }

    @Test("only a byte array of 16 KiB or more that ends an envelope whose other fields are at hand splits it")
    func whereAnEnvelopeSplits() throws {
        let label = try ValueCoding.encode("label"), large = try ValueCoding.encode(Self.bytes)
        let payload = try Self.envelope([label, large])
        #expect(Self.split(payload) == Self.bytes.count)
        #expect(Self.split(payload, prefix: payload.count - Self.bytes.count) == Self.bytes.count)
        // A field before the bytes missing from the prefix.
        #expect(Self.split(payload, prefix: payload.count - Self.bytes.count - 1) == 0)
        // Too small, not bytes, not last, more after it, not an envelope.
        #expect(Self.split(try Self.envelope([label, ValueCoding.encode([UInt8](repeating: 1, count: (16 << 10) - 1))])) == 0)
        #expect(Self.split(try Self.envelope([ValueCoding.encode(String(repeating: "a", count: 1 << 20))])) == 0)
        #expect(Self.split(try Self.envelope([large, label])) == 0)
        #expect(Self.split(payload + [0]) == 0)
        var wrongVersion = payload
        wrongVersion[0] = 2
        #expect(Self.split(wrongVersion) == 0)
        #expect(Self.split([UInt8](repeating: 0xff, count: 1 << 20)) == 0)

        // The two parts read as the whole does, and encode back to the same bytes.
        let whole = try CallEnvelope(decoding: payload)
        let parts = try CallEnvelope(decoding: Array(payload.dropLast(Self.bytes.count)), followedBy: Array(payload.suffix(Self.bytes.count)))
        #expect(parts.target == whole.target && parts.method == whole.method)
        #expect(parts.trailingBytes == Self.bytes)
        #expect(try parts.encoded() == payload)
        #expect(Array(parts.arguments[0]) == Array(whole.arguments[0]))
    }

    @Test("a tail that is not the last argument's byte array, or longer than it, is a malformed envelope")
    func tailThatDoesNotFit() throws {
        let label = try ValueCoding.encode("label"), large = try ValueCoding.encode(Self.bytes)
        let payload = try Self.envelope([label, large])
        let cut = payload.count - Self.bytes.count
        // One byte of the array left in the head: its header is not all that remains there.
        #expect(throws: CallEnvelope.FormatError.self) {
            try CallEnvelope(decoding: Array(payload.prefix(cut + 1)), followedBy: Array(payload.suffix(Self.bytes.count - 1)))
        }
        // The tail longer than the last argument.
        #expect(throws: CallEnvelope.FormatError.self) {
            try CallEnvelope(decoding: Array(payload.prefix(cut - 1)), followedBy: Array(payload.suffix(Self.bytes.count + 1)))
        }
        // Not a byte array: a string's bytes after its header.
        let text = try Self.envelope([ValueCoding.encode(String(repeating: "a", count: 20_000))])
        #expect(throws: CallEnvelope.FormatError.self) {
            try CallEnvelope(decoding: Array(text.dropLast(20_000)), followedBy: Array(text.suffix(20_000)))
        }
        // No argument at all.
        let none = try Self.envelope([])
        #expect(throws: CallEnvelope.FormatError.self) { try CallEnvelope(decoding: none, followedBy: [1, 2]) }
        // A truncated tail: the argument's length says more.
        #expect(throws: CallEnvelope.FormatError.self) {
            try CallEnvelope(decoding: Array(payload.prefix(cut)), followedBy: Array(payload.suffix(Self.bytes.count).dropLast()))
        }
    }
}
