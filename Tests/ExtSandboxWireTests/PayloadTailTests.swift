import Foundation
import Glibc
import Synchronization
import Testing
@testable import ExtSandboxWire
import TestSupport

@Suite("A frame's payload tail", .offThePool)
struct PayloadTailTests {
    static let head = Array("the envelope".utf8)
    /// Larger than a socket's buffer: written in several parts.
    static let tail = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) }

    @Test("a tail goes out right after the payload as one payload: encoded, sent blocking, and queued and flushed in parts")
    func tailIsPartOfThePayload() throws {
        let frame = Frame.request(id: 9, payload: Self.head, payloadTail: Self.tail)
        let whole = Frame.request(id: 9, payload: Self.head + Self.tail)
        #expect(frame.payloadCount == whole.payload.count)
        #expect(try FrameEncoder().encode(frame) == FrameEncoder().encode(whole))
        #expect(frame.header == whole.header)

        let (a, b) = try FrameSocket.makePair()
        // Non-blocking, before anyone reads: the first `sendmsg` takes what fits in the socket's
        // buffer (far less than the tail), the rest waits in the queue.
        try a.enqueue(Frame(kind: .oneway, payload: Self.head, payloadTail: Self.tail))
        #expect(a.pendingOutputBytes > 0 && a.pendingOutputBytes < FrameHeader.encodedSize + Self.head.count + Self.tail.count)
        let receiver = UncheckedSendableBox(b)
        let received = Mutex<[Frame]>([])
        let reader = TestThread {
            while let next = try? receiver.value.receive() { received.withLock { $0.append(next) } }
        }
        while !(try a.flush()) { usleep(1000) }
        // Blocking: every part written in turn.
        try a.send(frame)
        try a.send(.goodbye)
        a.close()
        reader.join()
        let frames = received.withLock { $0 }
        #expect(frames.count == 3)
        #expect(frames.first == .oneway(payload: Self.head + Self.tail))
        #expect(frames.dropFirst().first == whole)
        #expect(frames.last == .goodbye)
        // A received frame's payload is whole: its tail is empty.
        #expect(frames.allSatisfy { $0.payloadTail.isEmpty })
    }

    @Test("the peer's maximum frame size counts the tail: over it, nothing is written")
    func tailCountsAgainstTheMaximum() throws {
        let (a, b) = try FrameSocket.makePair()
        defer { b.close() }
        a.encoder.maximumFrameSize = UInt32(ExtSandboxWire.headerSize + Self.head.count + 100)
        #expect(throws: WireError.frameTooLarge(length: UInt64(ExtSandboxWire.headerSize + Self.head.count + 101),
                                               maximum: a.encoder.maximumFrameSize)) {
            try a.send(.request(id: 1, payload: Self.head, payloadTail: [UInt8](repeating: 1, count: 101)))
        }
        try a.send(.request(id: 2, payload: Self.head, payloadTail: [UInt8](repeating: 1, count: 100)))
        a.close()
        #expect(try b.receive() == .request(id: 2, payload: Self.head + [UInt8](repeating: 1, count: 100)))
        #expect(try b.receive() == nil)
    }
}
