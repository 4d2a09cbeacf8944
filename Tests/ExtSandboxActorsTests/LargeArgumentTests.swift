import Distributed
import ExtSandboxActors
import Synchronization
import Testing

@Resolvable
protocol ByteSink: DistributedActor where ActorSystem == ExtensionActorSystem {
    distributed func take(_ label: String, _ bytes: [UInt8]) async throws -> Int
    distributed func takeFirst(_ bytes: [UInt8], _ label: String) async throws -> Int
}

distributed actor ChecksummingSink: ByteSink {
    distributed func take(_ label: String, _ bytes: [UInt8]) -> Int { label.utf8.count + Self.checksum(bytes) }
    distributed func takeFirst(_ bytes: [UInt8], _ label: String) -> Int { label.utf8.count + Self.checksum(bytes) }
    static func checksum(_ bytes: [UInt8]) -> Int { bytes.enumerated().reduce(0) { $0 &+ Int($1.element) &* ($1.offset &+ 1) } }
}

/// A loopback transport that also takes calls in two parts, and records what each call sent.
final class TwoPartLoopback: CallTransport {
    struct Sent {
        var head: [UInt8]
        var tail: [UInt8]
        /// Where the tail's bytes were when the transport got them.
        var tailAddress: UInt?
    }

    let peer: ExtensionActorSystem
    let sent = Mutex<[Sent]>([])
    init(peer: ExtensionActorSystem) { self.peer = peer }

    func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer {
        sent.withLock { $0.append(Sent(head: envelope, tail: [], tailAddress: nil)) }
        return await peer.serve(envelope, fileDescriptors: fileDescriptors)
    }

    func call(_ envelope: [UInt8], followedBy tail: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer {
        let address = tail.withUnsafeBytes { $0.baseAddress.map { UInt(bitPattern: $0) } }
        sent.withLock { $0.append(Sent(head: envelope, tail: tail, tailAddress: address)) }
        return await peer.serve(envelope + tail, fileDescriptors: fileDescriptors)
    }
}

@Suite("A large byte-array argument travels without a copy on the sending side")
struct LargeArgumentTests {
    static func connected() -> (sink: $ByteSink, served: ChecksummingSink, transport: TwoPartLoopback) {
        let host = ExtensionActorSystem(side: .host), ext = ExtensionActorSystem(side: .extension)
        let transport = TwoPartLoopback(peer: ext)
        host.attach(transport)
        let served = ChecksummingSink(actorSystem: ext)
        ext.export(ExportedObject(served, as: $ByteSink.self))
        return (try! host.remoteObject($ByteSink.self), served, transport)
    }

    @Test("the last argument's bytes are handed to the transport as they are, after an envelope that ends with their tag and length")
    func lastArgumentIsTheTail() async throws {
        let (sink, served, transport) = Self.connected()
        let bytes = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        #expect(try await sink.take("label", bytes) == 5 + ChecksummingSink.checksum(bytes))
        withExtendedLifetime(served) {}
        let sent = try #require(transport.sent.withLock { $0.first })
        // The caller's own storage: no copy was made to build the envelope.
        #expect(sent.tailAddress != nil)
        #expect(sent.tailAddress == bytes.withUnsafeBytes { $0.baseAddress.map { UInt(bitPattern: $0) } })
        #expect(sent.head.count < 512)
        // The same bytes as one envelope (the format is unchanged): the argument decodes from the two together.
        let envelope = try CallEnvelope(decoding: sent.head + sent.tail)
        #expect(envelope.arguments.count == 2)
        #expect(try ValueCoding.decode([UInt8].self, from: Array(envelope.arguments[1])) == bytes)
        #expect(try ValueCoding.decode(String.self, from: Array(envelope.arguments[0])) == "label")
        #expect(try CallEnvelope(target: envelope.target, method: envelope.method,
                                 arguments: [ValueCoding.encode("label")[...], ValueCoding.encode(bytes)[...]]).encoded()
                == sent.head + sent.tail)
    }

    @Test("a large array that is not last, and a small last one, go inside the envelope")
    func otherArgumentsStayInTheEnvelope() async throws {
        let (sink, served, transport) = Self.connected()
        let large = [UInt8](repeating: 7, count: 1 << 20), small = [UInt8](repeating: 9, count: 100)
        #expect(try await sink.takeFirst(large, "x") == 1 + ChecksummingSink.checksum(large))
        #expect(try await sink.take("y", small) == 1 + ChecksummingSink.checksum(small))
        withExtendedLifetime(served) {}
        let sent = transport.sent.withLock { $0 }
        #expect(sent.count == 2)
        #expect(sent.allSatisfy { $0.tail.isEmpty })
        #expect(sent.first.map { $0.head.count > 1 << 20 } == true)
    }
}
