import ExtSandboxWire
import Glibc

/// Fuzz entry points of the wire protocol (ExtSandboxWire).
public enum WireFuzzing {
    /// What a decoder made of a stream: the frames it returned (in order), and the error that
    /// stopped it (including ``FrameDecoder/finish()``'s), if any.
    struct Outcome: Equatable {
        var frames: [Frame] = []
        var error: WireError?
    }

    /// One `recvmsg` worth of input: a range of the stream and the fds that came with it.
    struct Chunk {
        var range: Range<Int>
        var fdCount: Int
    }

    /// Input: byte 0 picks the maximum frame size (255: the 16 MiB default, else 16 + 16·n),
    /// byte 1 seeds the chunking of the fd-less run, byte 2 the chunking and fds of the run with
    /// fds; the rest is the stream.
    ///
    /// Properties: the decoder neither crashes nor traps; cutting the stream into chunks does not
    /// change the frames or the error; re-encoding the frames gives back the bytes they came from;
    /// a frame's HELLO or ERROR payload that parses encodes back to the same bytes; every fd
    /// handed to the decoder ends up either in a returned frame or closed, never leaked.
    public static func frameDecoder(_ input: UnsafeRawBufferPointer) {
        guard input.count >= 3 else { return }
        let maximum: UInt32 = input[0] == 255
            ? ExtSandboxWire.defaultMaximumFrameSize : UInt32(ExtSandboxWire.headerSize) + 16 * UInt32(input[0])
        let stream = UnsafeRawBufferPointer(rebasing: input[3...])

        let whole = decode(stream, maximum: maximum, chunks: [Chunk(range: 0..<stream.count, fdCount: 0)])
        var generator = SplitMix(seed: input[1])
        let pieces = decode(stream, maximum: maximum, chunks: chunks(of: stream.count, &generator, withFDs: false))
        require(pieces == whole, "chunking changed the result: \(whole) as one chunk, \(pieces) in chunks")

        // The frames are the stream's prefix, byte for byte.
        let encoder = FrameEncoder(maximumFrameSize: maximum)
        var offset = 0
        for frame in whole.frames {
            let bytes: [UInt8]
            do { bytes = try encoder.encode(frame) } catch {
                fatalError("fuzz property violated: decoded frame \(frame) does not encode: \(error)")
            }
            require(offset + bytes.count <= stream.count && bytes.elementsEqual(stream[offset..<offset + bytes.count]),
                    "frame \(frame) re-encodes to other bytes than it was decoded from (at \(offset))")
            offset += bytes.count
            checkPayload(of: frame)
        }
        if whole.error == nil { require(offset == stream.count, "the decoder finished cleanly with \(stream.count - offset) bytes unaccounted for") }

        var fdGenerator = SplitMix(seed: input[2])
        let fdChunks = chunks(of: stream.count, &fdGenerator, withFDs: true)
        var handed: [HandedFD] = []
        let withFDs = decode(stream, maximum: maximum, chunks: fdChunks, handed: &handed)
        var returned: Set<Int32> = []
        for frame in withFDs.frames {
            require(frame.fds.count <= ExtSandboxWire.maximumFDsPerFrame && frame.kind.allowedFDCounts.contains(frame.fds.count),
                    "frame \(frame) carries a number of fds its kind does not allow")
            for fd in frame.fdNumbers {
                require(returned.insert(fd).inserted, "fd \(fd) returned twice")
                require(fcntl(fd, F_GETFD) >= 0, "frame \(frame) returned fd \(fd), which is not open")
            }
            frame.closeFDs()
        }
        for fd in handed {
            require(!fd.isStillOpen, "fd \(fd.number) handed to the decoder was neither returned nor closed (leak)")
        }
    }

    /// Input: a payload. Properties: ``Hello`` and ``ErrorPayload`` either refuse it or encode back
    /// to exactly it; ``FrameHeader/decode(_:maximumFrameSize:)`` either refuses the first 20
    /// bytes or encodes back to exactly them.
    public static func payloads(_ input: UnsafeRawBufferPointer) {
        let bytes = [UInt8](input)
        if let hello = try? Hello(payload: bytes) {
            require(hello.payload == bytes, "HELLO \(hello) re-encodes to other bytes")
            require(hello.maximumFrameSize >= ExtSandboxWire.minimumMaximumFrameSize, "HELLO accepted a maximum below the minimum")
            if (try? hello.checkVersion()) != nil { require(hello.version == ExtSandboxWire.protocolVersion, "checkVersion accepted \(hello.version)") }
            let frame = Frame.hello(hello)
            require((try? frame.hello()) == hello, "a HELLO frame does not give back its HELLO")
        }
        if let error = try? ErrorPayload(payload: bytes) {
            require(error.payload == bytes, "ERROR payload \(error) re-encodes to other bytes")
            _ = error.code.description
        }
        if input.count >= FrameHeader.encodedSize,
           let header = try? FrameHeader.decode(input, maximumFrameSize: ExtSandboxWire.defaultMaximumFrameSize)
        {
            var again = [UInt8](repeating: 0, count: FrameHeader.encodedSize)
            again.withUnsafeMutableBytes { header.encode(into: $0) }
            require(again.elementsEqual(input[0..<FrameHeader.encodedSize]), "header \(header) re-encodes to other bytes")
        }
    }

    // MARK: Helpers

    /// Chunk boundaries (and fds per chunk) for a stream of `count` bytes.
    static func chunks(of count: Int, _ generator: inout SplitMix, withFDs: Bool) -> [Chunk] {
        var out: [Chunk] = []
        var start = 0
        repeat {
            // Mostly short chunks, so headers and payloads get split everywhere; sometimes empty.
            let size = generator.below(4) == 0 ? generator.below(64) : generator.below(24)
            let end = min(count, start + size)
            var fds = 0
            if withFDs {
                let roll = generator.below(16)
                fds = roll < 10 ? 0 : roll < 15 ? 1 + generator.below(3) : ExtSandboxWire.maximumFDsPerFrame + generator.below(2)
            }
            out.append(Chunk(range: start..<end, fdCount: fds))
            start = end
        } while start < count
        return out
    }

    static func decode(_ stream: UnsafeRawBufferPointer, maximum: UInt32, chunks: [Chunk]) -> Outcome {
        var handed: [HandedFD] = []
        return decode(stream, maximum: maximum, chunks: chunks, handed: &handed)
    }

    /// An fd handed to the decoder: the write end of a pipe of its own, known by its inode. A
    /// closed number may be taken at once by another thread's file (the test suite replays the
    /// seeds beside other tests), so "still open" means "still this pipe", not "the number is open".
    struct HandedFD {
        let number: Int32
        let inode: UInt64

        init() {
            var ends: [Int32] = [-1, -1]
            require(pipe(&ends) == 0, "pipe failed: errno \(errno)")
            close(ends[0])
            _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)  // never into a process another test starts
            var status = stat()
            require(fstat(ends[1], &status) == 0, "fstat failed: errno \(errno)")
            number = ends[1]
            inode = UInt64(status.st_ino)
        }

        var isStillOpen: Bool {
            var status = stat()
            return fstat(number, &status) == 0 && UInt64(status.st_ino) == inode && (status.st_mode & S_IFMT) == S_IFIFO
        }
    }

    /// Feeds `chunks` of `stream` to a fresh decoder, as ``FrameSocket`` does: begin, consume until
    /// the chunk is used up, end; then finish. New fds (pipes' write ends) are appended to
    /// `handed`.
    static func decode(_ stream: UnsafeRawBufferPointer, maximum: UInt32, chunks: [Chunk], handed: inout [HandedFD]) -> Outcome {
        var decoder = FrameDecoder(maximumFrameSize: maximum)
        var outcome = Outcome()
        do throws(WireError) {
            for chunk in chunks {
                let new = (0..<chunk.fdCount).map { _ in HandedFD() }
                let fds = new.map(\.number)
                handed += new
                try decoder.beginChunk(fds: fds)
                var offset = chunk.range.lowerBound
                while offset < chunk.range.upperBound {
                    let piece = UnsafeRawBufferPointer(rebasing: stream[offset..<chunk.range.upperBound])
                    let (consumed, frame) = try decoder.consume(piece)
                    require(consumed > 0 || frame != nil, "consume made no progress")
                    require(consumed <= piece.count, "consume consumed more than it was given")
                    offset += consumed
                    if let frame { outcome.frames.append(frame) }
                }
                try decoder.endChunk()
            }
            try decoder.finish()
            require(decoder.isAtFrameBoundary, "finish() succeeded but the decoder is not at a frame boundary")
        } catch {
            outcome.error = error
            require(decoder.error == error, "the decoder threw \(error) but reports \(String(describing: decoder.error))")
            require(decoder.reservedByteCount == 0, "a failed decoder still holds a payload buffer")
        }
        return outcome
    }

    static func checkPayload(of frame: Frame) {
        switch frame.kind {
        case .hello:
            if let hello = try? frame.hello() { require(hello.payload == frame.payload, "HELLO \(hello) re-encodes to other bytes") }
        case .error:
            if let error = try? frame.errorPayload() { require(error.payload == frame.payload, "ERROR \(error) re-encodes to other bytes") }
        default:
            break
        }
    }

}
