/// Appends little-endian integers, length-prefixed strings and byte arrays.
struct ByteWriter {
    private(set) var output: [UInt8] = []

    init() {
        output.reserveCapacity(16 << 10)
    }

    mutating func raw(_ bytes: [UInt8]) { output += bytes }
    mutating func u8(_ value: UInt8) { output.append(value) }
    mutating func bool(_ value: Bool) { output.append(value ? 1 : 0) }

    mutating func u32(_ value: UInt32) { littleEndian(UInt64(value), byteCount: 4) }

    mutating func u64(_ value: UInt64) { littleEndian(value, byteCount: 8) }

    private mutating func littleEndian(_ value: UInt64, byteCount: Int) {
        for i in 0..<byteCount { output.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) }
    }

    mutating func count(_ value: Int) { u32(UInt32(value)) }

    mutating func bytes(_ value: [UInt8]) {
        count(value.count)
        output += value
    }

    mutating func string(_ value: String) {
        count(value.utf8.count)
        output += value.utf8
    }

    mutating func strings(_ values: [String]) {
        count(values.count)
        for value in values { string(value) }
    }

    /// A presence flag, then the value if present (the reader's `bool() ? value : nil`).
    mutating func optionalString(_ value: String?) {
        bool(value != nil)
        if let value { string(value) }
    }

    mutating func optionalU64(_ value: UInt64?) {
        bool(value != nil)
        if let value { u64(value) }
    }
}

/// Reads what ``ByteWriter`` writes. A read past the end, a length longer than what is left, an
/// invalid boolean or optional tag, or invalid UTF-8 sets `failed` and returns a placeholder;
/// decoders check `failed` before trusting anything they read.
struct ByteReader {
    let input: [UInt8]
    var offset = 0
    var failed = false

    init(_ input: [UInt8]) {
        self.input = input
    }

    var remaining: Int { input.count - offset }

    mutating func u8() -> UInt8 {
        guard !failed, offset < input.count else {
            failed = true
            return 0
        }
        defer { offset += 1 }
        return input[offset]
    }

    mutating func bool() -> Bool {
        switch u8() {
        case 0: return false
        case 1: return true
        default:
            failed = true
            return false
        }
    }

    mutating func u32() -> UInt32 { UInt32(truncatingIfNeeded: littleEndian(byteCount: 4)) }

    mutating func u64() -> UInt64 { littleEndian(byteCount: 8) }

    /// The next `byteCount` (at most 8) bytes as a little-endian integer.
    private mutating func littleEndian(byteCount: Int) -> UInt64 {
        guard !failed, remaining >= byteCount else {
            failed = true
            return 0
        }
        var value: UInt64 = 0
        for i in 0..<byteCount { value |= UInt64(input[offset + i]) << (8 * UInt64(i)) }
        offset += byteCount
        return value
    }

    /// A count of elements that are at least one byte each: never more than what is left (so a
    /// garbled count cannot make the decoder allocate or loop much).
    mutating func count() -> Int {
        let value = Int(u32())
        guard !failed, value <= remaining else {
            failed = true
            return 0
        }
        return value
    }

    mutating func bytes() -> [UInt8] {
        let length = count()
        guard !failed else { return [] }
        defer { offset += length }
        return Array(input[offset..<offset + length])
    }

    mutating func string() -> String {
        let length = count()
        guard !failed else { return "" }
        let start = offset
        offset += length
        let value = input.withUnsafeBufferPointer { buffer -> String? in
            let utf8 = UnsafeBufferPointer(rebasing: buffer[start..<start + length])
            var ascii = true
            for byte in utf8 where byte >= 0x80 {
                ascii = false
                break
            }
            // ASCII (nearly every string of a policy) is valid UTF-8 as it is, and this
            // initializer is specialized; the generic validating one costs ~1000 instructions.
            if ascii { return String(decoding: utf8, as: UTF8.self) }
            return String(validating: utf8, as: UTF8.self)
        }
        guard let value else {
            failed = true
            return ""
        }
        return value
    }

    mutating func strings() -> [String] {
        var out: [String] = []
        for _ in 0..<count() where !failed { out.append(string()) }
        return failed ? [] : out
    }

    mutating func optionalString() -> String? {
        bool() ? string() : nil
    }

    mutating func optionalU64() -> UInt64? {
        bool() ? u64() : nil
    }
}
