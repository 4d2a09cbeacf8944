/// One distributed call as it travels: the payload of a REQUEST (docs/wire-protocol.md §12).
///
/// ```
/// u8   version      1
/// u8   flags        0 (a receiver rejects any other value)
/// u16  target length, then the target's UTF-8 (1–255 bytes): the callee's ExtensionActorID
/// u16  method length, then the method identifier's UTF-8 (1–4096 bytes)
/// u16  argument count (0–64)
/// per argument: u32 length, then that many bytes: the argument's encoded value (§12.2)
/// ```
///
/// All integers are big-endian; nothing may follow the last argument. The peer is untrusted:
/// decoding checks every length against what remains before it copies anything.
public struct CallEnvelope: Sendable, Hashable {
    /// The envelope version this implementation writes and reads.
    public static let version: UInt8 = 1
    /// Longest target name, in bytes.
    public static let maximumTargetLength = 255
    /// Longest method identifier, in bytes.
    public static let maximumMethodLength = 4096
    /// Most arguments in one call.
    public static let maximumArgumentCount = 64

    /// The callee's name on the connection.
    public var target: String
    /// The method identifier (`RemoteCallTarget.identifier`; see docs/wire-protocol.md §12).
    public var method: String
    /// Each argument's encoded value, in order (a decoded envelope's share its bytes). With
    /// ``trailingBytes``, the last one is only the start of its value: a byte array's tag and length.
    public var arguments: [ArraySlice<UInt8>]
    /// The bytes of the last argument's byte array, when they were received into an array of
    /// their own (``init(decoding:followedBy:)``): the argument's value is the last of
    /// ``arguments`` followed by these. Empty otherwise.
    public var trailingBytes: [UInt8]

    /// An envelope to encode: a call of `method` on the object named `target`, with each
    /// argument's encoded value (``ValueCoding/encode(_:)``).
    public init(target: String, method: String, arguments: [ArraySlice<UInt8>]) {
        self.target = target
        self.method = method
        self.arguments = arguments
        trailingBytes = []
    }

    /// Why an envelope could not be read or written: the field and what was wrong with it.
    public struct FormatError: Error, Sendable, Hashable, CustomStringConvertible {
        /// The field that is wrong, and how.
        public var reason: String
        /// A format error for `reason`.
        public init(_ reason: String) { self.reason = reason }
        public var description: String { "malformed call envelope: \(reason)" }
    }

    /// The envelope's bytes. Throws when a field is over its bound or the whole is over
    /// `maximumSize` (the peer's maximum frame size less the frame header, usually).
    public func encoded(maximumSize: Int = .max) throws(FormatError) -> [UInt8] {
        var sizes = arguments.map { $0.count }
        if !trailingBytes.isEmpty, !sizes.isEmpty { sizes[sizes.count - 1] += trailingBytes.count }
        return try Self.encode(target: target, method: method, argumentSizes: sizes, maximumSize: maximumSize) { index, bytes in
            bytes += arguments[index]
            if index == arguments.count - 1 { bytes += trailingBytes }
        }
    }

    /// An envelope whose arguments are values, each written straight into the envelope's bytes
    /// (a large argument is copied once).
    static func encode(target: String, method: String, values: [WireValue]) throws(FormatError) -> [UInt8] {
        try encode(target: target, method: method, argumentSizes: values.map { $0.serializedSize }, maximumSize: .max) { index, bytes in
            values[index].write(to: &bytes)
        }
    }

    /// The bytes of the last argument's value that a large byte array leaves out of the envelope's
    /// array: at least this many, or none.
    static let minimumTailSize = 16 << 10

    /// ``encode(target:method:values:)`` in two parts whose concatenation is that envelope: when
    /// the last argument is a byte array of at least ``minimumTailSize`` bytes, the head ends
    /// with that value's tag and length and the tail is the array itself, which a transport sends
    /// from where it is (a large argument is then never copied on the sending side); otherwise
    /// the tail is empty.
    static func encodeParts(target: String, method: String, values: [WireValue]) throws(FormatError) -> (head: [UInt8], tail: [UInt8]) {
        guard case .bytes(let large)? = values.last, large.count >= minimumTailSize else {
            return (try encode(target: target, method: method, values: values), [])
        }
        let last = values.count - 1
        let head = try encode(target: target, method: method, argumentSizes: values.map { $0.serializedSize }, maximumSize: .max,
                              leftOut: large.count) { index, bytes in
            if index == last {
                WireValue.writeBytesHeader(count: large.count, to: &bytes)
            } else {
                values[index].write(to: &bytes)
            }
        }
        return (head, large)
    }

    /// `leftOut`: bytes at the end that `writeArgument` does not write (the caller sends them).
    private static func encode(target: String, method: String, argumentSizes: [Int], maximumSize: Int, leftOut: Int = 0,
                               writeArgument: (Int, inout [UInt8]) -> Void) throws(FormatError) -> [UInt8] {
        // Written from the strings' own UTF-8 (a native string knows its count): no copies.
        let targetBytes = target.utf8, methodBytes = method.utf8
        guard (1...Self.maximumTargetLength).contains(targetBytes.count) else {
            throw FormatError("target of \(targetBytes.count) bytes (1–\(Self.maximumTargetLength))")
        }
        guard (1...Self.maximumMethodLength).contains(methodBytes.count) else {
            throw FormatError("method identifier of \(methodBytes.count) bytes (1–\(Self.maximumMethodLength))")
        }
        guard argumentSizes.count <= Self.maximumArgumentCount else {
            throw FormatError("\(argumentSizes.count) arguments (at most \(Self.maximumArgumentCount))")
        }
        let size = 2 + 2 + targetBytes.count + 2 + methodBytes.count + 2 + argumentSizes.reduce(0) { $0 + 4 + $1 }
        guard size <= maximumSize else { throw FormatError("\(size) bytes, over the peer's limit of \(maximumSize)") }
        for argumentSize in argumentSizes where argumentSize > Int(UInt32.max) {
            throw FormatError("an argument of \(argumentSize) bytes")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(size - leftOut)
        bytes.append(Self.version)
        bytes.append(0)
        appendBigEndian(UInt16(targetBytes.count), to: &bytes)
        bytes += targetBytes
        appendBigEndian(UInt16(methodBytes.count), to: &bytes)
        bytes += methodBytes
        appendBigEndian(UInt16(argumentSizes.count), to: &bytes)
        for (index, argumentSize) in argumentSizes.enumerated() {
            appendBigEndian(UInt32(argumentSize), to: &bytes)
            writeArgument(index, &bytes)
        }
        return bytes
    }

    /// Reads an envelope, refusing anything the format does not allow (see the type's layout).
    public init(decoding bytes: [UInt8]) throws(FormatError) {
        try self.init(decoding: bytes, followedBy: [])
    }

    /// Reads an envelope whose last bytes, `tail`, were received apart (a frame's
    /// `payloadTail`): they must be all of the last argument's byte array, which
    /// ``trailingBytes`` then holds as it is, not copied. With an empty `tail`, the same as
    /// ``init(decoding:)``.
    public init(decoding bytes: [UInt8], followedBy tail: [UInt8]) throws(FormatError) {
        var reader = BoundedReader(bytes[...])
        let version = try reader.byte("version")
        guard version == Self.version else { throw FormatError("version \(version) (this side reads \(Self.version))") }
        let flags = try reader.byte("flags")
        guard flags == 0 else { throw FormatError("flags 0x\(String(flags, radix: 16)) (must be 0)") }
        target = try reader.string("target", lengthRange: 1...Self.maximumTargetLength)
        method = try reader.string("method identifier", lengthRange: 1...Self.maximumMethodLength)
        let count = Int(try reader.uint16("argument count"))
        guard count <= Self.maximumArgumentCount else {
            throw FormatError("\(count) arguments (at most \(Self.maximumArgumentCount))")
        }
        var arguments: [ArraySlice<UInt8>] = []
        arguments.reserveCapacity(count)
        for index in 0..<count {
            let length = Int(try reader.uint32("length of argument \(index)"))
            let here = index == count - 1 ? length - tail.count : length
            guard here >= 0 else { throw FormatError("argument \(index) of \(length) bytes, fewer than the \(tail.count) after the envelope") }
            arguments.append(try reader.slice(here, "argument \(index)"))
        }
        guard reader.remaining == 0 else { throw FormatError("\(reader.remaining) bytes after the last argument") }
        if !tail.isEmpty {
            var header: [UInt8] = []
            WireValue.writeBytesHeader(count: tail.count, to: &header)
            guard let last = arguments.last, last.elementsEqual(header) else {
                throw FormatError("the \(tail.count) bytes after the envelope are not its last argument's byte array")
            }
        }
        self.arguments = arguments
        trailingBytes = tail
    }
}

/// Reads big-endian fields from untrusted bytes, checking each length against what remains.
/// A field's name is only made into text for an error (most names interpolate an index).
struct BoundedReader {
    private let bytes: ArraySlice<UInt8>
    private var offset: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        offset = bytes.startIndex
    }

    var remaining: Int { bytes.endIndex - offset }

    mutating func byte(_ field: @autoclosure () -> String) throws(CallEnvelope.FormatError) -> UInt8 {
        try need(1, field)
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func uint16(_ field: @autoclosure () -> String) throws(CallEnvelope.FormatError) -> UInt16 {
        try need(2, field)
        defer { offset += 2 }
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    mutating func uint32(_ field: @autoclosure () -> String) throws(CallEnvelope.FormatError) -> UInt32 {
        try need(4, field)
        defer { offset += 4 }
        return (0..<4).reduce(UInt32(0)) { $0 << 8 | UInt32(bytes[offset + $1]) }
    }

    mutating func uint64(_ field: @autoclosure () -> String) throws(CallEnvelope.FormatError) -> UInt64 {
        try need(8, field)
        defer { offset += 8 }
        return (0..<8).reduce(UInt64(0)) { $0 << 8 | UInt64(bytes[offset + $1]) }
    }

    /// A u32 length, then that many bytes of valid UTF-8.
    mutating func string32(_ field: @autoclosure () -> String) throws(CallEnvelope.FormatError) -> String {
        try text(of: slice(Int(try uint32("\(field()) length")), field()), field)
    }

    mutating func bytes(_ count: Int, _ field: @autoclosure () -> String) throws(CallEnvelope.FormatError) -> [UInt8] {
        Array(try slice(count, field()))
    }

    /// The next `count` bytes, sharing the input's storage.
    mutating func slice(_ count: Int, _ field: @autoclosure () -> String) throws(CallEnvelope.FormatError) -> ArraySlice<UInt8> {
        try need(count, field)
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    /// A u16 length, then that many bytes of valid UTF-8.
    mutating func string(_ field: @autoclosure () -> String, lengthRange: ClosedRange<Int>) throws(CallEnvelope.FormatError) -> String {
        let length = Int(try uint16("\(field()) length"))
        guard lengthRange.contains(length) else {
            throw CallEnvelope.FormatError("\(field()) of \(length) bytes (\(lengthRange.lowerBound)–\(lengthRange.upperBound))")
        }
        return try text(of: slice(length, field()), field)
    }

    private func text(of raw: ArraySlice<UInt8>, _ field: () -> String) throws(CallEnvelope.FormatError) -> String {
        guard let text = String(validating: raw, as: UTF8.self) else { throw CallEnvelope.FormatError("\(field()) is not UTF-8") }
        return text
    }

    private func need(_ count: Int, _ field: () -> String) throws(CallEnvelope.FormatError) {
        guard count <= remaining else {
            throw CallEnvelope.FormatError("\(field()) needs \(count) bytes, \(remaining) remain")
        }
    }
}

func appendBigEndian<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.bigEndian) { bytes += $0 }
}
