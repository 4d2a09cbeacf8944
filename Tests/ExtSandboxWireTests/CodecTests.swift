import Glibc
import SandboxSystem
import Testing
@testable import ExtSandboxWire
import TestSupport

@Suite("Frame codec", .offThePool)
struct CodecTests {
    static let helloExample = [UInt8](hex: """
        00 00 00 1a  01  00  00 00  00 00 00 00  00 00 00 00 00 00 00 00
        00 01  01 00 00 00  68 6f 73 74
        """)
    static let requestExample = [UInt8](hex: """
        00 00 00 14  02  00  00 01  00 00 00 00  00 00 00 00 00 00 00 07
        70 69 6e 67
        """)

    @Test("HELLO encodes to the documented bytes")
    func helloLayout() throws {
        let frame = Frame.hello(Hello(version: 1, maximumFrameSize: 16 * 1024 * 1024, name: "host"))
        #expect(try FrameEncoder().encode(frame) == Self.helloExample)
        var decoder = FrameDecoder()
        let frames = try decoder.append(Self.helloExample)
        #expect(frames == [frame])
        #expect(try frames[0].hello() == Hello(version: 1, maximumFrameSize: 16 << 20, name: "host"))
    }

    @Test("REQUEST with one fd encodes to the documented bytes")
    func requestLayout() throws {
        let frame = Frame.request(id: 7, payload: Array("ping".utf8), fds: [borrowed(42)])
        #expect(try FrameEncoder().encode(frame) == Self.requestExample)
        let probe = Probe()
        defer { probe.dispose() }
        var decoder = FrameDecoder()
        let frames = try decoder.append(Self.requestExample, fds: [probe.writeEnd])
        #expect(frames == [Frame.request(id: 7, payload: Array("ping".utf8), fds: [borrowed(probe.writeEnd)])])
        frames[0].closeFDs()
        #expect(probe.isClosed)
    }

    static let samples: [Frame] = [
        .hello(Hello(name: nil)),
        .hello(Hello(maximumFrameSize: 4096, name: "é ✓")),
        .request(id: 1, payload: []),
        .request(id: .max, payload: Array(0...255)),
        .reply(id: 99, payload: [UInt8](repeating: 0xAB, count: 70_000)),
        .error(id: 3, code: .cancelled, message: "cancelled"),
        .error(id: 0, code: .application(7), message: ""),
        .oneway(payload: Array("note".utf8)),
        .cancel(id: 12),
        .goodbye,
        .ready(identifier: "com.example.echo"),
    ]

    @Test("round trip, whole and one byte at a time", arguments: samples)
    func roundTrip(_ frame: Frame) throws {
        let bytes = try FrameEncoder().encode(frame)
        var whole = FrameDecoder()
        #expect(try whole.append(bytes) == [frame])
        #expect(whole.isAtFrameBoundary)

        var bytewise = FrameDecoder()
        var frames: [Frame] = []
        for byte in bytes { frames += try bytewise.append([byte]) }
        #expect(frames == [frame])
        try bytewise.finish()
    }

    @Test("many frames in one chunk, and split at every offset")
    func manyFrames() throws {
        let frames = Self.samples
        var bytes: [UInt8] = []
        for frame in frames { bytes += try FrameEncoder().encode(frame) }
        var decoder = FrameDecoder()
        #expect(try decoder.append(bytes) == frames)
        for split in stride(from: 0, through: bytes.count, by: 97) {
            var decoder = FrameDecoder()
            let out = try decoder.append(Array(bytes[..<split])) + decoder.append(Array(bytes[split...]))
            #expect(out == frames)
        }
    }

    @Test("fds pair with the frame that starts in their chunk, after fd-less frames")
    func fdPairing() throws {
        let probes = (0..<3).map { _ in Probe() }
        defer { probes.forEach { $0.dispose() } }
        let plain = try FrameEncoder().encode(.oneway(payload: [1, 2, 3]))
        let withFDs = try FrameEncoder().encode(.request(id: 5, payload: [9], fds: [borrowed(0), borrowed(0)]))
        var decoder = FrameDecoder()
        // One recvmsg: an fd-less frame, then the frame the fds belong to (the kernel glues them).
        let frames = try decoder.append(plain + withFDs, fds: [probes[0].writeEnd, probes[1].writeEnd])
        #expect(frames.map(\.fdNumbers) == [[], [probes[0].writeEnd, probes[1].writeEnd]])
        frames.forEach { $0.closeFDs() }

        // The fd-bearing frame's header split across chunks: fds arrive with its first 4 bytes.
        let one = try FrameEncoder().encode(.reply(id: 8, payload: [7], fds: [borrowed(0)]))
        var split = FrameDecoder()
        #expect(try split.append(Array(one[..<4]), fds: [probes[2].writeEnd]).isEmpty)
        let out = try split.append(Array(one[4...]))
        #expect(out.map(\.fdNumbers) == [[probes[2].writeEnd]])
        out[0].closeFDs()
        #expect(probes.allSatisfy { $0.isClosed })
    }

    @Test("an oversized length is refused before anything is allocated")
    func oversized() throws {
        var decoder = FrameDecoder()
        // 1 GiB declared: only the 4 length bytes are ever looked at.
        let header = rawHeader(length: 1 << 30, kind: 2, id: 1)
        #expect(throws: WireError.frameTooLarge(length: 1 << 30, maximum: ExtSandboxWire.defaultMaximumFrameSize)) {
            _ = try decoder.append(Array(header[..<4]))
        }
        #expect(decoder.bufferedByteCount == 0)
        #expect(decoder.reservedByteCount == 0)
        // The error is final.
        #expect(throws: WireError.self) { _ = try decoder.append([0]) }

        // Just over a small maximum, header complete: still nothing reserved.
        var small = FrameDecoder(maximumFrameSize: 4096)
        #expect(throws: WireError.frameTooLarge(length: 4097, maximum: 4096)) {
            _ = try small.append(rawHeader(length: 4097, kind: 2, id: 1))
        }
        #expect(small.reservedByteCount == 0)

        // A frame at the maximum is fine, and the decoder buffers only what arrived.
        var exact = FrameDecoder(maximumFrameSize: 4096)
        #expect(try exact.append(rawHeader(length: 4096, kind: 2, id: 1) + [1, 2, 3]).isEmpty)
        #expect(exact.bufferedByteCount == 23)
        #expect(exact.remainingPayloadCount == 4080 - 3)
    }

    @Test("the encoder refuses what the peer would refuse")
    func encoderLimits() {
        let encoder = FrameEncoder(maximumFrameSize: 4096)
        #expect(throws: WireError.frameTooLarge(length: 4097, maximum: 4096)) {
            _ = try encoder.encode(.request(id: 1, payload: [UInt8](repeating: 0, count: 4081)))
        }
        #expect(throws: WireError.tooManyFDs(kind: .request, count: 17, maximum: 16)) {
            _ = try encoder.encode(.request(id: 1, payload: [], fds: (0..<17).map { _ in borrowed(0) }))
        }
        #expect(throws: WireError.invalidID(kind: .request, id: 0)) {
            _ = try encoder.encode(.request(id: 0, payload: []))
        }
        #expect(throws: WireError.invalidFDCount(kind: .connect, count: 0, allowed: 1...1)) {
            _ = try encoder.encode(Frame(kind: .connect, id: 1))
        }
        #expect(throws: WireError.unknownFlags(kind: .oneway, flags: 1)) {
            _ = try encoder.encode(Frame(kind: .oneway, flags: 1))
        }
    }

    struct Malformed: Sendable, CustomTestStringConvertible {
        var label: String
        var bytes: [UInt8]
        var fdCount = 0
        var atEOF = false
        var error: WireError
        var testDescription: String { label }
    }

    static let malformed: [Malformed] = [
        Malformed(label: "length < 16", bytes: rawHeader(length: 15, kind: 2, id: 1),
                  error: .frameTooShort(length: 15)),
        Malformed(label: "length 0", bytes: [0, 0, 0, 0], error: .frameTooShort(length: 0)),
        Malformed(label: "garbage (HTTP request)", bytes: Array("GET / HTTP/1.1\r\n\r\n".utf8),
                  error: .frameTooLarge(length: 0x4745_5420, maximum: ExtSandboxWire.defaultMaximumFrameSize)),
        Malformed(label: "unknown kind", bytes: rawFrame(kind: 42, id: 1), error: .unknownKind(42)),
        Malformed(label: "kind 0", bytes: rawFrame(kind: 0), error: .unknownKind(0)),
        Malformed(label: "unknown flags", bytes: rawFrame(kind: 2, flags: 0x80, id: 1),
                  error: .unknownFlags(kind: .request, flags: 0x80)),
        Malformed(label: "nonzero reserved", bytes: rawFrame(kind: 5, reserved: 1),
                  error: .nonzeroReserved(kind: .oneway, value: 1)),
        Malformed(label: "request id 0", bytes: rawFrame(kind: 2, id: 0), error: .invalidID(kind: .request, id: 0)),
        Malformed(label: "oneway with an id", bytes: rawFrame(kind: 5, id: 3), error: .invalidID(kind: .oneway, id: 3)),
        Malformed(label: "17 fds declared", bytes: rawFrame(kind: 2, fdCount: 17, id: 1),
                  error: .tooManyFDs(kind: .request, count: 17, maximum: 16)),
        Malformed(label: "fd on a HELLO", bytes: rawFrame(kind: 1, fdCount: 1), fdCount: 1,
                  error: .invalidFDCount(kind: .hello, count: 1, allowed: 0...0)),
        Malformed(label: "declares 2 fds, 1 arrives", bytes: rawFrame(kind: 2, fdCount: 2, id: 4), fdCount: 1,
                  error: .fdCountMismatch(kind: .request, id: 4, declared: 2, received: 1)),
        Malformed(label: "declares 1 fd, none arrives", bytes: rawFrame(kind: 3, fdCount: 1, id: 4),
                  error: .fdCountMismatch(kind: .reply, id: 4, declared: 1, received: 0)),
        Malformed(label: "fds no frame declares", bytes: rawFrame(kind: 5), fdCount: 2,
                  error: .unexpectedFDs(count: 2)),
        Malformed(label: "truncated payload at EOF", bytes: Array(rawFrame(kind: 5, payload: [1, 2, 3, 4])[..<22]),
                  atEOF: true, error: .truncatedFrame(received: 22, expected: 24)),
        Malformed(label: "truncated header at EOF", bytes: [0, 0, 0, 20, 2], atEOF: true,
                  error: .truncatedFrame(received: 5, expected: 20)),
        Malformed(label: "GOODBYE with an id", bytes: rawFrame(kind: 7, id: 9),
                  error: .invalidID(kind: .goodbye, id: 9)),
    ]

    @Test("malformed input: a typed error, every fd closed", arguments: malformed)
    func malformedInput(_ input: Malformed) {
        let probes = (0..<input.fdCount).map { _ in Probe() }
        defer { probes.forEach { $0.dispose() } }
        var decoder = FrameDecoder()
        #expect(throws: input.error) {
            let frames = try decoder.append(input.bytes, fds: probes.map(\.writeEnd))
            frames.forEach { $0.closeFDs() }
            if input.atEOF { try decoder.finish() }
        }
        #expect(probes.allSatisfy { $0.isClosed })
        #expect(decoder.error == input.error)
        #expect(decoder.bufferedByteCount == 0 && decoder.reservedByteCount == 0)
        // Byte by byte gives the same error.
        if input.fdCount == 0 {
            var bytewise = FrameDecoder()
            #expect(throws: input.error) {
                for byte in input.bytes { _ = try bytewise.append([byte]) }
                try bytewise.finish()
            }
        }
    }

    @Test("payload helpers reject malformed payloads")
    func payloads() throws {
        #expect(throws: WireError.self) { _ = try Hello(payload: [0, 1, 0, 0]) }
        #expect(throws: WireError.self) { _ = try Hello(payload: [0, 1, 0, 0, 0x0f, 0xff]) } // < 4096
        #expect(throws: WireError.self) { _ = try Hello(payload: [0, 1, 0, 1, 0, 0, 0xff]) } // bad UTF-8
        #expect(throws: WireError.unsupportedVersion(2, supported: 1)) {
            try Hello(payload: Hello(version: 2).payload).checkVersion()
        }
        #expect(throws: WireError.self) { _ = try ErrorPayload(payload: [0, 0, 1]) }
        let error = try ErrorPayload(payload: [0, 0, 0, 100] + Array("boom".utf8))
        #expect(error == ErrorPayload(code: .application(0), message: "boom"))
        #expect(error.code.isApplicationDefined)
        #expect(WireError.frameTooLarge(length: 5, maximum: 4).errorCode == .tooLarge)
        #expect("\(WireError.fdCountMismatch(kind: .request, id: 4, declared: 2, received: 1))"
            == "REQUEST frame (id 4) declares 2 file descriptors but 1 arrived with it")
    }
}
