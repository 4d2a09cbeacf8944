extension CallEnvelope {
    /// Where a received envelope splits so that its last argument's bytes need no copy: when the
    /// payload is an envelope whose last argument is a byte array of at least 16 KiB that ends
    /// the payload, the size of that array, else 0. A receiver reads those bytes into an array of
    /// their own (a frame's `payloadTail`, through `FrameDecoder.PayloadSplitter`) and hands both
    /// parts to ``init(decoding:followedBy:)``, which adopts the array as the argument.
    ///
    /// `prefix` is the payload's first bytes (untrusted; at most `payloadCount` of them): an
    /// envelope whose fields before that array are not all in it is not split. Only the layout is
    /// read here; the decoder checks the rest.
    public static func trailingByteCount(payloadCount: Int, prefix: UnsafeRawBufferPointer) -> Int {
        guard payloadCount >= minimumTailSize else { return 0 }
        var offset = 0
        /// The next `size` bytes as a big-endian number, or nil past the prefix.
        func number(_ size: Int) -> Int? {
            guard size <= prefix.count - offset else { return nil }
            defer { offset += size }
            return (offset..<offset + size).reduce(0) { $0 << 8 | Int(prefix[$1]) }
        }
        func skip(_ size: Int) -> Bool {
            guard size <= prefix.count - offset else { return false }
            offset += size
            return true
        }
        guard number(1) == Int(version), number(1) == 0,
              let targetLength = number(2), skip(targetLength),
              let methodLength = number(2), skip(methodLength),
              let count = number(2), (1...maximumArgumentCount).contains(count) else { return 0 }
        for _ in 1..<count {
            guard let length = number(4), skip(length) else { return 0 }
        }
        guard let length = number(4), number(1) == Int(WireValue.bytesTag), let byteCount = number(4),
              byteCount >= minimumTailSize, length == 5 + byteCount, offset + byteCount == payloadCount else { return 0 }
        return byteCount
    }
}
