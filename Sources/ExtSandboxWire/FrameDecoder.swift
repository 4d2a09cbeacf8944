import SandboxSystem

/// An incremental frame decoder: feed it the bytes and fds of each `recvmsg` as they arrive, get
/// whole frames out.
///
/// **Chunks.** The decoder pairs fds with frames the way the kernel delivers them: fds sent with a
/// frame's first byte arrive in the same `recvmsg` as that byte (a Unix stream socket never reads
/// past a segment that carries fds). So each `recvmsg` result is one *chunk*: announce it with
/// ``beginChunk(fds:)``, feed its bytes with ``consume(_:)`` (which stops at the end of each frame),
/// and call ``endChunk()`` once all of them are consumed. A frame that declares `n > 0` fds must
/// find exactly `n` in the chunk where its first byte arrived; fds that no frame of their chunk
/// claims are an error. ``append(_:fds:)`` does all three steps at once.
///
/// **Limits.** The length field is checked against ``maximumFrameSize`` as soon as its 4 bytes are
/// known, before any buffer is allocated for the payload; the payload buffer is then allocated
/// once, at its declared size, so memory stays bounded by one maximum frame (and, as large
/// allocations are mmap-backed, resident memory grows only as bytes actually arrive).
///
/// **Errors.** Every error is final: the decoder closes every fd it holds (unclaimed, or attached
/// to the frame in progress; with ``UntrustedDescriptors/close(_:)`` if the peer is not trusted),
/// drops its buffers, and rethrows the same error from then on. Frames
/// already returned are the caller's (see ``Frame`` for fd ownership).
///
/// **Split payloads.** A decoder made with a ``PayloadSplitter`` asks it, for each payload of at
/// least ``splitThreshold`` bytes, how many of the payload's last bytes to receive into an array
/// of their own: the frame then has the rest as its ``Frame/payload`` and those as its
/// ``Frame/payloadTail``, so a layer above can adopt them as they are (a call's large byte-array
/// argument) instead of copying them out of the payload. The bytes are the same.
///
/// The decoder owns the fds it holds between chunks and frames: keep one copy of it per stream
/// (copying a decoder mid-frame would copy those descriptor numbers, not the descriptors).
public struct FrameDecoder: Sendable {
    /// Decides where a received payload splits: given the frame's kind, its payload's size and the
    /// first bytes of its payload already received (at most the whole payload), the number of
    /// bytes at its end that become the frame's ``Frame/payloadTail``, or 0 for none. The decoder
    /// splits only if everything before those bytes is in `prefix`; otherwise the payload is whole.
    /// It runs on untrusted bytes: read only within `prefix`.
    public typealias PayloadSplitter = @Sendable (_ kind: FrameKind, _ payloadCount: Int, _ prefix: UnsafeRawBufferPointer) -> Int

    /// Smallest payload the decoder asks its ``PayloadSplitter`` about: below it, one more copy
    /// costs less than the question.
    public static let splitThreshold = 16 * 1024

    /// The largest length field accepted (header plus payload).
    public let maximumFrameSize: UInt32
    /// Where a large payload splits (none: every payload is whole).
    public let payloadSplitter: PayloadSplitter?

    // Length prefix and header of the frame in progress, while incomplete.
    private var headerBytes: [UInt8]
    private var headerFill = 0
    // The frame in progress once its header is complete.
    private var current: FrameHeader?
    // The payload being filled: the whole payload, or the tail of a split one.
    private var payload: [UInt8] = []
    private var payloadFill = 0
    // The first part of a split payload in progress (complete: split only when it is all here).
    private var splitHead: [UInt8]?
    private var frameFDs: [Int32] = []
    private var frameStartChunk = 0
    // fds of the chunk `unclaimedChunk`, not yet claimed by a frame.
    private var unclaimedFDs: [Int32] = []
    private var unclaimedChunk = 0
    // fds that arrived with the first byte of the frame in progress, whose header was incomplete
    // at the end of that chunk.
    private var carriedFDs: [Int32] = []
    private var chunk = 0
    private var failure: WireError?

    /// Whether the fds it closes come from a peer that is not trusted (see
    /// ``UntrustedDescriptors``).
    public let untrustedPeer: Bool

    public init(maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize, untrustedPeer: Bool = false,
                payloadSplitter: PayloadSplitter? = nil) {
        self.maximumFrameSize = maximumFrameSize
        self.untrustedPeer = untrustedPeer
        self.payloadSplitter = payloadSplitter
        headerBytes = [UInt8](repeating: 0, count: FrameHeader.encodedSize)
    }

    /// Bytes of the frame in progress held by the decoder (prefix, header and payload so far).
    public var bufferedByteCount: Int {
        headerFill + (current == nil ? 0 : FrameHeader.encodedSize + (splitHead?.count ?? 0) + payloadFill)
    }

    /// Bytes reserved for the payload of the frame in progress (0 until its header is complete
    /// and valid).
    public var reservedByteCount: Int { (splitHead?.count ?? 0) + payload.count }

    /// Payload bytes still missing from the frame in progress whose header is complete (else 0).
    public var remainingPayloadCount: Int { current == nil ? 0 : payload.count - payloadFill }

    /// Whether the decoder is between frames (nothing buffered, no fds held).
    public var isAtFrameBoundary: Bool {
        headerFill == 0 && current == nil && unclaimedFDs.isEmpty && carriedFDs.isEmpty
    }

    /// The error that stopped the decoder, if any.
    public var error: WireError? { failure }

    // MARK: Chunks

    /// Starts a new chunk: the result of one `recvmsg`, whose ancillary data carried `fds`. The
    /// decoder owns `fds` from here on (and closes them if this throws).
    public mutating func beginChunk(fds: [Int32] = []) throws(WireError) {
        if let failure {
            UntrustedDescriptors.close(fds, untrusted: untrustedPeer)
            throw failure
        }
        chunk &+= 1
        guard !fds.isEmpty else { return }
        guard fds.count <= ExtSandboxWire.maximumFDsPerFrame else {
            UntrustedDescriptors.close(fds, untrusted: untrustedPeer)
            throw fail(.unexpectedFDs(count: fds.count))
        }
        // Unclaimed fds of an earlier chunk were moved to carriedFDs by endChunk(); none remain.
        unclaimedFDs = fds
        unclaimedChunk = chunk
    }

    /// Ends the current chunk. Throws ``WireError/unexpectedFDs(count:)`` if fds of this chunk are
    /// left that no frame claimed (unless the frame that started in this chunk still lacks the
    /// rest of its header, and so its fd count).
    public mutating func endChunk() throws(WireError) {
        if let failure { throw failure }
        guard !unclaimedFDs.isEmpty else { return }
        if current == nil, headerFill > 0, frameStartChunk == unclaimedChunk, carriedFDs.isEmpty {
            carriedFDs = unclaimedFDs
            unclaimedFDs = []
            return
        }
        throw fail(.unexpectedFDs(count: unclaimedFDs.count))
    }

    /// Signals the end of the stream. Throws ``WireError/truncatedFrame(received:expected:)`` if a
    /// frame is incomplete, ``WireError/unexpectedFDs(count:)`` if fds are left.
    public mutating func finish() throws(WireError) {
        if let failure { throw failure }
        if headerFill > 0 || current != nil {
            let expected = current.map { ExtSandboxWire.lengthPrefixSize + Int($0.length) } ?? FrameHeader.encodedSize
            throw fail(.truncatedFrame(received: bufferedByteCount, expected: expected))
        }
        let left = unclaimedFDs.count + carriedFDs.count
        if left > 0 { throw fail(.unexpectedFDs(count: left)) }
    }

    /// Gives up: closes every fd the decoder holds, drops its buffers and makes `error` final.
    /// Returns the error, for `throw decoder.abort(...)`.
    @discardableResult
    public mutating func abort(_ error: WireError) -> WireError { fail(error) }

    // MARK: Bytes

    /// Consumes bytes of the current chunk, up to the end of at most one frame.
    ///
    /// - Returns: how many bytes of `bytes` were consumed, and the frame that they completed, if
    ///   any. Call again with the rest while `consumed < bytes.count`.
    public mutating func consume(_ bytes: UnsafeRawBufferPointer) throws(WireError) -> (consumed: Int, frame: Frame?) {
        if let failure { throw failure }
        var offset = 0
        let count = bytes.count
        while offset < count {
            if current == nil {
                if headerFill == 0 {
                    frameStartChunk = chunk
                    if count - offset >= FrameHeader.encodedSize {
                        // Fast path: the whole header is in this chunk.
                        let header = try decodeHeader(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                        offset += FrameHeader.encodedSize
                        if let frame = try startPayload(header, from: bytes, offset: &offset) {
                            return (offset, frame)
                        }
                        continue
                    }
                }
                let take = min(FrameHeader.encodedSize - headerFill, count - offset)
                let fill = headerFill
                Self.copy(bytes, from: offset, count: take, into: &headerBytes, at: fill)
                headerFill += take
                offset += take
                if headerFill >= ExtSandboxWire.lengthPrefixSize, fill < ExtSandboxWire.lengthPrefixSize {
                    // Refuse an oversized or undersized frame as soon as its length is known.
                    let length = headerBytes.withUnsafeBytes {
                        UInt32(bigEndian: $0.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
                    }
                    do { try FrameHeader.checkLength(length, maximumFrameSize: maximumFrameSize) } catch {
                        throw fail(error)
                    }
                }
                guard headerFill == FrameHeader.encodedSize else { continue }
                let header = try headerBytes.withUnsafeBytes { raw in
                    Result { () throws(WireError) in try decodeHeader(raw) }
                }.get()
                headerFill = 0
                if let frame = try startPayload(header, from: bytes, offset: &offset) { return (offset, frame) }
            } else {
                let take = min(payload.count - payloadFill, count - offset)
                Self.copy(bytes, from: offset, count: take, into: &payload, at: payloadFill)
                payloadFill += take
                offset += take
                if payloadFill == payload.count { return (offset, completeFrame()) }
            }
        }
        return (offset, nil)
    }

    /// Lets `read` write payload bytes of the frame in progress directly into its buffer (e.g.
    /// `recvmsg` of a large payload without an intermediate copy). `read` gets the missing part
    /// of the payload buffer and returns how many bytes it wrote (≤ 0: none). Must only be called
    /// when ``remainingPayloadCount`` > 0; fds received by such a read belong to no frame.
    /// - Returns: `read`'s result and the frame, if the read completed it.
    public mutating func readPayload(_ read: (UnsafeMutableRawBufferPointer) -> Int) -> (result: Int, frame: Frame?) {
        precondition(failure == nil && current != nil && payloadFill < payload.count,
                     "readPayload needs a frame in progress with payload bytes missing")
        let fill = payloadFill
        let result = payload.withUnsafeMutableBytes { buffer in
            read(UnsafeMutableRawBufferPointer(rebasing: buffer[fill...]))
        }
        guard result > 0 else { return (result, nil) }
        precondition(result <= payload.count - fill, "readPayload: read reported more bytes than it was given")
        payloadFill += result
        return (result, payloadFill == payload.count ? completeFrame() : nil)
    }

    /// Convenience: one whole chunk (``beginChunk(fds:)``, ``consume(_:)`` until done,
    /// ``endChunk()``). Returns the frames it completed.
    public mutating func append(_ bytes: UnsafeRawBufferPointer, fds: [Int32] = []) throws(WireError) -> [Frame] {
        try beginChunk(fds: fds)
        var frames: [Frame] = []
        var offset = 0
        while offset < bytes.count {
            let (consumed, frame) = try consume(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            offset += consumed
            if let frame { frames.append(frame) }
        }
        do { try endChunk() } catch {
            for frame in frames { frame.closeFDs() }
            throw error
        }
        return frames
    }

    /// Convenience: ``append(_:fds:)`` for an array of bytes.
    public mutating func append(_ bytes: [UInt8], fds: [Int32] = []) throws(WireError) -> [Frame] {
        try bytes.withUnsafeBytes { raw in Result { () throws(WireError) in try append(raw, fds: fds) } }.get()
    }

    // MARK: Internals

    private mutating func decodeHeader(_ raw: UnsafeRawBufferPointer) throws(WireError) -> FrameHeader {
        let header: FrameHeader
        do { header = try FrameHeader.decode(raw, maximumFrameSize: maximumFrameSize) } catch { throw fail(error) }
        // Pair the fds: they arrived in the chunk of the frame's first byte.
        let declared = Int(header.fdCount)
        let startedNow = frameStartChunk == chunk
        if declared > 0 {
            if startedNow, unclaimedChunk == chunk, unclaimedFDs.count == declared {
                frameFDs = unclaimedFDs
                unclaimedFDs = []
            } else if !startedNow, carriedFDs.count == declared {
                frameFDs = carriedFDs
                carriedFDs = []
            } else {
                let received = startedNow ? (unclaimedChunk == chunk ? unclaimedFDs.count : 0) : carriedFDs.count
                throw fail(.fdCountMismatch(kind: header.kind, id: header.id, declared: declared, received: received))
            }
        } else if !carriedFDs.isEmpty {
            throw fail(.fdCountMismatch(kind: header.kind, id: header.id, declared: 0, received: carriedFDs.count))
        }
        return header
    }

    /// After a valid header: allocates the payload and takes what the chunk already holds.
    /// Copies `count` bytes of `bytes` from `offset` into `array` at `index`.
    private static func copy(_ bytes: UnsafeRawBufferPointer, from offset: Int, count: Int, into array: inout [UInt8], at index: Int) {
        array.withUnsafeMutableBytes { dst in
            (dst.baseAddress! + index).copyMemory(from: bytes.baseAddress! + offset, byteCount: count)
        }
    }

    private mutating func startPayload(_ header: FrameHeader, from bytes: UnsafeRawBufferPointer,
                                       offset: inout Int) throws(WireError) -> Frame? {
        let size = header.payloadCount
        let tailCount = splitTailCount(header, prefix: UnsafeRawBufferPointer(rebasing: bytes[offset..<min(bytes.count, offset + size)]))
        var head: [UInt8]?
        if tailCount > 0 {
            head = Self.array(copying: bytes, from: offset, count: size - tailCount)
            offset += size - tailCount
        }
        // What is left to receive: the whole payload, or the tail.
        let rest = head == nil ? size : tailCount
        let available = bytes.count - offset
        if rest <= available {
            // Fast path: the whole payload is here.
            let received = Self.array(copying: bytes, from: offset, count: rest)
            offset += rest
            let frame = Frame(kind: header.kind, id: header.id, payload: head ?? received, payloadTail: head == nil ? [] : received,
                              fds: takeFrameFDs(), flags: header.flags)
            return frame
        }
        current = header
        splitHead = head
        // UInt8 is trivial: the bytes are overwritten before the frame is handed out.
        payload = [UInt8](unsafeUninitializedCapacity: rest) { _, initialized in initialized = rest }
        payloadFill = 0
        if available > 0 {
            Self.copy(bytes, from: offset, count: available, into: &payload, at: 0)
            payloadFill = available
            offset += available
        }
        return nil
    }

    /// The splitter's answer for a payload whose first bytes are `prefix`, if the decoder can
    /// follow it (all the bytes before the tail are there), else 0.
    private func splitTailCount(_ header: FrameHeader, prefix: UnsafeRawBufferPointer) -> Int {
        let size = header.payloadCount
        guard let payloadSplitter, size >= Self.splitThreshold else { return 0 }
        let tailCount = payloadSplitter(header.kind, size, prefix)
        guard tailCount > 0, tailCount <= size, size - tailCount <= prefix.count else { return 0 }
        return tailCount
    }

    /// A new array of `count` bytes of `bytes` from `offset`.
    private static func array(copying bytes: UnsafeRawBufferPointer, from offset: Int, count: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            if count > 0 {
                UnsafeMutableRawPointer(buffer.baseAddress!).copyMemory(from: bytes.baseAddress! + offset, byteCount: count)
            }
            initialized = count
        }
    }

    private mutating func completeFrame() -> Frame {
        let header = current!
        let frame = Frame(kind: header.kind, id: header.id, payload: splitHead ?? payload, payloadTail: splitHead == nil ? [] : payload,
                          fds: takeFrameFDs(), flags: header.flags)
        current = nil
        payload = []
        splitHead = nil
        payloadFill = 0
        return frame
    }

    /// The fds of the frame being completed, owned from here on by the frame.
    private mutating func takeFrameFDs() -> [FileDescriptor] {
        defer { frameFDs = [] }
        return UntrustedDescriptors.adopt(frameFDs, untrusted: untrustedPeer)
    }

    private mutating func fail(_ error: WireError) -> WireError {
        UntrustedDescriptors.close(unclaimedFDs + carriedFDs + frameFDs, untrusted: untrustedPeer)
        unclaimedFDs = []
        carriedFDs = []
        frameFDs = []
        payload = []
        splitHead = nil
        payloadFill = 0
        current = nil
        headerFill = 0
        if failure == nil { failure = error }
        return failure!
    }
}
