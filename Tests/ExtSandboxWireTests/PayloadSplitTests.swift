import Foundation
import Glibc
import Synchronization
import Testing
@testable import ExtSandboxWire
import TestSupport

@Suite("A received payload split by the decoder's splitter", .offThePool)
struct PayloadSplitTests {
    static let head = Array("the envelope".utf8)
    /// Larger than a socket's buffer: received in several reads.
    static let tail = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) }

    /// Splits a REQUEST that starts with `head` after it; counts the questions.
    final class Splitter: Sendable {
        let asked = Mutex<[Int]>([])
        var split: FrameDecoder.PayloadSplitter {
            { [self] kind, payloadCount, prefix in
                asked.withLock { $0.append(payloadCount) }
                return kind == .request && prefix.starts(with: PayloadSplitTests.head) ? payloadCount - PayloadSplitTests.head.count : 0
            }
        }
    }

    @Test("a large payload's last bytes are read from the socket into an array of their own: the same bytes, split where the splitter said")
    func splitOnTheSocket() throws {
        let (a, b) = try FrameSocket.makeSocketPair()
        let sender = UncheckedSendableBox(FrameSocket(descriptor: a))
        let splitter = Splitter()
        let receiver = FrameReceiver(descriptor: b, payloadSplitter: splitter.split)
        defer {
            receiver.detach()
            b.close()
        }
        let medium = Array(Self.tail.prefix(20_000))
        let sent: [Frame] = [
            .request(id: 1, payload: Self.head, payloadTail: Self.tail),
            .oneway(payload: Self.head + Self.tail),
            .request(id: 2, payload: Self.head + medium),
            .request(id: 3, payload: Self.tail),
            .request(id: 4, payload: Self.head + [1, 2, 3]),
        ]
        let writer = TestThread {
            for frame in sent { try? sender.value.send(frame) }
            sender.value.close()
        }
        var frames: [Frame] = []
        while let frame = try receiver.receive() { frames.append(frame) }
        writer.join()
        #expect(frames == [
            .request(id: 1, payload: Self.head, payloadTail: Self.tail),
            .oneway(payload: Self.head + Self.tail),
            .request(id: 2, payload: Self.head, payloadTail: medium),
            .request(id: 3, payload: Self.tail),
            .request(id: 4, payload: Self.head + [1, 2, 3]),
        ])
        // Asked about the large payloads only.
        #expect(splitter.asked.withLock { $0 } == [Self.head.count + Self.tail.count, Self.head.count + Self.tail.count,
                                                   Self.head.count + medium.count, Self.tail.count])
    }

    @Test("a payload already in the read buffer splits too; an answer the decoder cannot follow leaves it whole")
    func splitInTheDecoder() throws {
        let medium = Array(Self.tail.prefix(20_000))
        let whole = try FrameEncoder().encode(.request(id: 5, payload: Self.head + medium))
        var decoder = FrameDecoder(payloadSplitter: Splitter().split)
        // The header in two chunks, the payload in the second.
        #expect(try decoder.append(Array(whole.prefix(7))).isEmpty)
        #expect(try decoder.append(Array(whole.dropFirst(7))) == [.request(id: 5, payload: Self.head, payloadTail: medium)])
        #expect(decoder.isAtFrameBoundary)

        // Only part of the head when the header is complete: not split.
        var partial = FrameDecoder(payloadSplitter: Splitter().split)
        let cut = FrameHeader.encodedSize + Self.head.count - 2
        #expect(try partial.append(Array(whole.prefix(cut))).isEmpty)
        #expect(try partial.append(Array(whole.dropFirst(cut))) == [.request(id: 5, payload: Self.head + medium)])

        // A splitter that asks for more than the payload: not split.
        var greedy = FrameDecoder(payloadSplitter: { _, payloadCount, _ in payloadCount + 1 })
        #expect(try greedy.append(whole) == [.request(id: 5, payload: Self.head + medium)])
        // All of it: an empty head.
        var everything = FrameDecoder(payloadSplitter: { _, payloadCount, _ in payloadCount })
        #expect(try everything.append(whole) == [.request(id: 5, payload: [], payloadTail: Self.head + medium)])
    }

    @Test("a split frame cut short is a truncated frame; an oversized length is refused before the splitter is asked")
    func truncatedAndOversized() throws {
        let medium = Array(Self.tail.prefix(20_000))
        let whole = try FrameEncoder().encode(.request(id: 6, payload: Self.head + medium))
        let splitter = Splitter()
        var decoder = FrameDecoder(payloadSplitter: splitter.split)
        let cut = whole.count - 100
        #expect(try decoder.append(Array(whole.prefix(cut))).isEmpty)
        #expect(decoder.bufferedByteCount == cut)
        #expect(decoder.reservedByteCount == Self.head.count + medium.count)
        #expect(throws: WireError.truncatedFrame(received: cut, expected: whole.count)) { try decoder.finish() }
        #expect(splitter.asked.withLock { $0 } == [Self.head.count + medium.count])

        let small = Splitter()
        var limited = FrameDecoder(maximumFrameSize: 64 << 10, payloadSplitter: small.split)
        let oversized = try FrameEncoder().encode(.request(id: 7, payload: Self.head + Array(Self.tail.prefix(64 << 10))))
        #expect(throws: WireError.frameTooLarge(length: UInt64(ExtSandboxWire.headerSize + Self.head.count + (64 << 10)), maximum: 64 << 10)) {
            try limited.append(Array(oversized.prefix(4096)))
        }
        #expect(small.asked.withLock { $0 }.isEmpty)
        #expect(limited.reservedByteCount == 0)
    }
}
