/// A value as it travels in a call (an argument, a result, a registered error): a small tagged
/// binary format any language can read (docs/wire-protocol.md §12.2). Big-endian throughout:
///
/// | tag | value | followed by |
/// |---:|---|---|
/// | 0 | null | nothing |
/// | 1, 2 | false, true | nothing |
/// | 3 | signed integer | i64 |
/// | 4 | unsigned integer | u64 |
/// | 5 | floating point | f64 (IEEE 754 bits) |
/// | 6 | string | u32 length, UTF-8 |
/// | 7 | bytes (`[UInt8]`) | u32 length, the bytes |
/// | 8 | array | u32 count, the values |
/// | 9 | map (a keyed value: a struct, an enum case) | u32 count, then per entry a u32 key length, the key's UTF-8, the value |
/// | 10 | file descriptor (``TransferredFileDescriptor``) | u16 index among the frame's fds |
@_spi(Fuzzing) public enum WireValue: Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case string(String)
    case bytes([UInt8])
    case array([WireValue])
    case map([(key: String, value: WireValue)])
    case descriptor(UInt16)

    /// Deepest nesting of arrays and maps a reader accepts.
    static let maximumDepth = 64

    public static func == (left: WireValue, right: WireValue) -> Bool {
        switch (left, right) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.uint(let a), .uint(let b)): a == b
        case (.double(let a), .double(let b)): a.bitPattern == b.bitPattern
        case (.string(let a), .string(let b)): a == b
        case (.bytes(let a), .bytes(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.map(let a), .map(let b)): a.elementsEqual(b) { $0.key == $1.key && $0.value == $1.value }
        case (.descriptor(let a), .descriptor(let b)): a == b
        default: false
        }
    }

    /// The value's bytes.
    public func serialized() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(serializedSize)
        write(to: &bytes)
        return bytes
    }

    /// How many bytes ``serialized()`` makes.
    var serializedSize: Int {
        switch self {
        case .null, .bool: 1
        case .int, .uint, .double: 9
        case .string(let value): 5 + value.utf8.count
        case .bytes(let value): 5 + value.count
        case .array(let values): values.reduce(5) { $0 + $1.serializedSize }
        case .map(let entries): entries.reduce(5) { $0 + 4 + $1.key.utf8.count + $1.value.serializedSize }
        case .descriptor: 3
        }
    }

    func write(to bytes: inout [UInt8]) {
        switch self {
        case .null: bytes.append(0)
        case .bool(let value): bytes.append(value ? 2 : 1)
        case .int(let value): bytes.append(3); appendBigEndian(value, to: &bytes)
        case .uint(let value): bytes.append(4); appendBigEndian(value, to: &bytes)
        case .double(let value): bytes.append(5); appendBigEndian(value.bitPattern, to: &bytes)
        case .string(let value):
            bytes.append(6)
            appendBigEndian(UInt32(value.utf8.count), to: &bytes)
            bytes += value.utf8
        case .bytes(let value):
            Self.writeBytesHeader(count: value.count, to: &bytes)
            bytes += value
        case .array(let values):
            bytes.append(8)
            appendBigEndian(UInt32(values.count), to: &bytes)
            for value in values { value.write(to: &bytes) }
        case .map(let entries):
            bytes.append(9)
            appendBigEndian(UInt32(entries.count), to: &bytes)
            for entry in entries {
                appendBigEndian(UInt32(entry.key.utf8.count), to: &bytes)
                bytes += entry.key.utf8
                entry.value.write(to: &bytes)
            }
        case .descriptor(let index):
            bytes.append(10)
            appendBigEndian(index, to: &bytes)
        }
    }

    /// The tag of a byte array.
    static let bytesTag: UInt8 = 7

    /// What precedes a byte array's `count` bytes: its tag and length.
    static func writeBytesHeader(count: Int, to bytes: inout [UInt8]) {
        bytes.append(bytesTag)
        appendBigEndian(UInt32(count), to: &bytes)
    }

    /// Reads one value that takes all of `bytes`. The peer is untrusted: every length and count
    /// is checked against what remains before anything is reserved, and nesting is bounded.
    public init(parsing bytes: ArraySlice<UInt8>) throws(CallEnvelope.FormatError) {
        var reader = BoundedReader(bytes)
        self = try Self.read(&reader, depth: 0)
        guard reader.remaining == 0 else { throw CallEnvelope.FormatError("\(reader.remaining) bytes after a value") }
    }

    private static func read(_ reader: inout BoundedReader, depth: Int) throws(CallEnvelope.FormatError) -> WireValue {
        let tag = try reader.byte("value tag")
        switch tag {
        case 0: return .null
        case 1: return .bool(false)
        case 2: return .bool(true)
        case 3: return .int(Int64(bitPattern: try reader.uint64("integer")))
        case 4: return .uint(try reader.uint64("unsigned integer"))
        case 5: return .double(Double(bitPattern: try reader.uint64("floating point")))
        case 6: return .string(try reader.string32("string"))
        case 7: return .bytes(try reader.bytes(Int(try reader.uint32("bytes length")), "bytes"))
        case 10: return .descriptor(try reader.uint16("file descriptor index"))
        case 8, 9:
            guard depth < maximumDepth else { throw CallEnvelope.FormatError("values nested deeper than \(maximumDepth)") }
            let count = Int(try reader.uint32("count"))
            // Each element takes at least 1 byte, each entry at least 5: a count beyond that is a lie.
            guard count <= reader.remaining / (tag == 8 ? 1 : 5) else {
                throw CallEnvelope.FormatError("\(count) elements in \(reader.remaining) bytes")
            }
            if tag == 8 {
                var values: [WireValue] = []
                values.reserveCapacity(count)
                for _ in 0..<count { values.append(try read(&reader, depth: depth + 1)) }
                return .array(values)
            }
            var entries: [(key: String, value: WireValue)] = []
            entries.reserveCapacity(count)
            for _ in 0..<count {
                let key = try reader.string32("key")
                entries.append((key, try read(&reader, depth: depth + 1)))
            }
            return .map(entries)
        default:
            throw CallEnvelope.FormatError("unknown value tag \(tag)")
        }
    }
}
