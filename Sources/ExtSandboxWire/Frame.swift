#if canImport(Glibc)
import Glibc
#endif
import SandboxSystem

/// The fixed 16-byte header that follows a frame's 4-byte length prefix.
///
/// On the wire (all integers big-endian):
///
/// | offset | size | field                                     |
/// |-------:|-----:|-------------------------------------------|
/// | 0      | 4    | `length`: bytes that follow (header + payload) |
/// | 4      | 1    | `kind` (``FrameKind``)                    |
/// | 5      | 1    | `flags` (0; receivers reject any bit)      |
/// | 6      | 2    | `fdCount`: fds attached to the first byte  |
/// | 8      | 4    | reserved (0; receivers reject nonzero)     |
/// | 12     | 8    | `id`                                      |
public struct FrameHeader: Sendable, Hashable {
    /// Bytes of the length prefix plus the header: 20.
    public static let encodedSize = ExtSandboxWire.lengthPrefixSize + ExtSandboxWire.headerSize

    /// The length field: the header's 16 bytes plus the payload's.
    public var length: UInt32
    public var kind: FrameKind
    public var flags: UInt8
    public var fdCount: UInt16
    public var id: UInt64

    /// Number of payload bytes (`length - 16`).
    public var payloadCount: Int { Int(length) - ExtSandboxWire.headerSize }

    public init(kind: FrameKind, flags: UInt8 = 0, fdCount: UInt16 = 0, id: UInt64 = 0, payloadCount: Int) {
        self.length = UInt32(truncatingIfNeeded: payloadCount + ExtSandboxWire.headerSize)
        self.kind = kind
        self.flags = flags
        self.fdCount = fdCount
        self.id = id
    }

    /// Checks the length field alone against the limits: at least 16, at most `maximumFrameSize`.
    /// Receivers call this as soon as the first 4 bytes of a frame are known.
    public static func checkLength(_ length: UInt32, maximumFrameSize: UInt32) throws(WireError) {
        guard length >= UInt32(ExtSandboxWire.headerSize) else { throw .frameTooShort(length: length) }
        guard length <= maximumFrameSize else {
            throw .frameTooLarge(length: UInt64(length), maximum: maximumFrameSize)
        }
    }

    /// Decodes and validates the 20 bytes of a length prefix and header (the first 20 bytes of
    /// `bytes`), in this order: length, kind, flags, reserved, fd count, id (see ``validate()``).
    public static func decode(_ bytes: UnsafeRawBufferPointer, maximumFrameSize: UInt32) throws(WireError) -> FrameHeader {
        precondition(bytes.count >= encodedSize, "FrameHeader.decode needs \(encodedSize) bytes")
        let length = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
        try checkLength(length, maximumFrameSize: maximumFrameSize)
        let rawKind = bytes[4]
        guard let kind = FrameKind(rawValue: rawKind) else { throw .unknownKind(rawKind) }
        let flags = bytes[5]
        let fdCount = UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: 6, as: UInt16.self))
        let reserved = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
        let id = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 12, as: UInt64.self))
        guard flags == 0 else { throw .unknownFlags(kind: kind, flags: flags) }
        guard reserved == 0 else { throw .nonzeroReserved(kind: kind, value: reserved) }
        var header = FrameHeader(kind: kind, fdCount: fdCount, id: id, payloadCount: 0)
        header.length = length
        try header.validate()
        return header
    }

    /// Checks the kind-specific rules: no flags, at most 16 fds and the count the kind allows
    /// (``FrameKind/allowedFDCounts``), and the id rule (``FrameKind/requiresZeroID``).
    public func validate() throws(WireError) {
        guard flags == 0 else { throw .unknownFlags(kind: kind, flags: flags) }
        let count = Int(fdCount)
        guard count <= ExtSandboxWire.maximumFDsPerFrame else {
            throw .tooManyFDs(kind: kind, count: count, maximum: ExtSandboxWire.maximumFDsPerFrame)
        }
        guard kind.allowedFDCounts.contains(count) else {
            throw .invalidFDCount(kind: kind, count: count, allowed: kind.allowedFDCounts)
        }
        if let zero = kind.requiresZeroID, zero != (id == 0) { throw .invalidID(kind: kind, id: id) }
    }

    /// Writes the 20 bytes of length prefix and header to the start of `buffer`.
    public func encode(into buffer: UnsafeMutableRawBufferPointer) {
        precondition(buffer.count >= Self.encodedSize, "FrameHeader.encode needs \(Self.encodedSize) bytes")
        buffer.storeBytes(of: length.bigEndian, toByteOffset: 0, as: UInt32.self)
        buffer[4] = kind.rawValue
        buffer[5] = flags
        buffer.storeBytes(of: fdCount.bigEndian, toByteOffset: 6, as: UInt16.self)
        buffer.storeBytes(of: UInt32(0), toByteOffset: 8, as: UInt32.self)
        buffer.storeBytes(of: id.bigEndian, toByteOffset: 12, as: UInt64.self)
    }
}

/// One frame: a kind, an id, a payload and the file descriptors attached to it.
///
/// **File descriptor ownership.** A frame's ``fds`` are owned descriptors (`FileDescriptor`):
/// each is closed once, when its last holder lets it go or someone calls its `close()`; a copy
/// of a frame shares them, it does not duplicate them.
/// - A frame returned by ``FrameDecoder`` or ``FrameSocket/receive()`` holds the fds that came
///   with it: keep the `FileDescriptor` to keep one, `release()` it to hand its number to an owner
///   of another kind; the ones nobody keeps are closed when the frame goes. Fds from a peer that
///   is not trusted are closed the way ``UntrustedDescriptors/close(_:)`` closes them (their close
///   can be made to block).
/// - ``FrameSocket/send(_:)`` closes none: the kernel takes its own reference to each fd as it
///   is written, so the caller's stay open, and close when the caller lets them go.
/// - ``FrameSocket/enqueue(_:)`` takes the frame's fds over: it closes them (`close()`) once the
///   frame is written, or when it is dropped unsent. Do not `close()` one while it is queued.
public struct Frame: Sendable, Hashable {
    public var kind: FrameKind
    /// Always 0 in protocol version 1.
    public var flags: UInt8
    /// Request id (REQUEST, REPLY, ERROR, CANCEL), connection id (CONNECT), or 0.
    public var id: UInt64
    public var payload: [UInt8]
    /// More payload, sent right after ``payload`` from its own storage: a sender that has a large
    /// block of bytes to put at the end of a small one (a call's byte-array argument after its
    /// envelope) sends both without first copying them into one array. On the wire the two are
    /// one payload. A received frame's tail is empty unless its decoder's
    /// ``FrameDecoder/PayloadSplitter`` chose to receive the payload's last bytes into an array
    /// of their own (the bytes are the same; two frames compare by their parts).
    public var payloadTail: [UInt8]
    /// File descriptors attached to the frame (at most 16); see the ownership rules above.
    public var fds: [FileDescriptor]

    public init(kind: FrameKind, id: UInt64 = 0, payload: [UInt8] = [], payloadTail: [UInt8] = [], fds: [FileDescriptor] = [], flags: UInt8 = 0) {
        self.kind = kind
        self.flags = flags
        self.id = id
        self.payload = payload
        self.payloadTail = payloadTail
        self.fds = fds
    }

    /// Bytes of payload on the wire: ``payload`` and ``payloadTail``.
    public var payloadCount: Int { payload.count + payloadTail.count }

    /// The header this frame encodes to.
    public var header: FrameHeader {
        FrameHeader(kind: kind, flags: flags, fdCount: UInt16(truncatingIfNeeded: fds.count), id: id,
                    payloadCount: payloadCount)
    }

    /// The numbers of ``fds``, for system calls while the frame holds them.
    public var fdNumbers: [Int32] { fds.map(\.rawValue) }

    /// Closes every fd of the frame now rather than when it goes (each once, whichever copy
    /// of the frame calls it, and however often).
    public func closeFDs() {
        for fd in fds { fd.close() }
    }

    // Equal frames carry the same descriptor numbers (descriptors are not values).
    public static func == (lhs: Frame, rhs: Frame) -> Bool {
        lhs.kind == rhs.kind && lhs.flags == rhs.flags && lhs.id == rhs.id && lhs.payload == rhs.payload
            && lhs.payloadTail == rhs.payloadTail && lhs.fdNumbers == rhs.fdNumbers
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(kind)
        hasher.combine(id)
        hasher.combine(payload)
        hasher.combine(fdNumbers)
    }

    // MARK: Constructors for each kind

    /// A HELLO frame carrying `hello`.
    public static func hello(_ hello: Hello) -> Frame { Frame(kind: .hello, payload: hello.payload) }
    /// A REQUEST with a nonzero `id`.
    public static func request(id: UInt64, payload: [UInt8], payloadTail: [UInt8] = [], fds: [FileDescriptor] = []) -> Frame {
        Frame(kind: .request, id: id, payload: payload, payloadTail: payloadTail, fds: fds)
    }
    /// The REPLY to request `id`.
    public static func reply(id: UInt64, payload: [UInt8], fds: [FileDescriptor] = []) -> Frame {
        Frame(kind: .reply, id: id, payload: payload, fds: fds)
    }
    /// An ERROR answering request `id` (0: a connection-level error).
    public static func error(id: UInt64, code: ErrorCode, message: String = "") -> Frame {
        Frame(kind: .error, id: id, payload: ErrorPayload(code: code, message: message).payload)
    }
    /// A ONEWAY message.
    public static func oneway(payload: [UInt8], fds: [FileDescriptor] = []) -> Frame {
        Frame(kind: .oneway, payload: payload, fds: fds)
    }
    /// A CANCEL of request `id`.
    public static func cancel(id: UInt64) -> Frame { Frame(kind: .cancel, id: id) }
    /// A GOODBYE.
    public static var goodbye: Frame { Frame(kind: .goodbye) }
    /// A CONNECT (control socket) handing over `descriptor` as connection `id`.
    public static func connect(id: UInt64, descriptor: FileDescriptor) -> Frame {
        Frame(kind: .connect, id: id, fds: [descriptor])
    }
    /// A READY (control socket) from the extension named `identifier`.
    public static func ready(identifier: String) -> Frame {
        Frame(kind: .ready, payload: Array(identifier.utf8))
    }

    /// The HELLO payload of this frame. Throws if the frame is not a HELLO or the payload is malformed.
    public func hello() throws(WireError) -> Hello {
        guard kind == .hello else { throw .unexpectedFrame(kind: kind, reason: "expected HELLO") }
        return try Hello(payload: payload)
    }

    /// The ERROR payload of this frame. Throws if the frame is not an ERROR or the payload is malformed.
    public func errorPayload() throws(WireError) -> ErrorPayload {
        guard kind == .error else { throw .unexpectedFrame(kind: kind, reason: "expected ERROR") }
        return try ErrorPayload(payload: payload)
    }
}

/// Turns frames into bytes, enforcing the limits a receiver will enforce.
public struct FrameEncoder: Sendable, Hashable {
    /// The largest length field allowed: the *peer's* maximum frame size (from its HELLO).
    public var maximumFrameSize: UInt32

    public init(maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize) {
        self.maximumFrameSize = maximumFrameSize
    }

    /// Checks that `frame` may be sent: its length within ``maximumFrameSize``, at most 16 fds, and
    /// the kind's rules (``FrameHeader/validate()``). Returns its header.
    @discardableResult
    public func validate(_ frame: Frame) throws(WireError) -> FrameHeader {
        let length = UInt64(frame.payloadCount) + UInt64(ExtSandboxWire.headerSize)
        guard length <= UInt64(maximumFrameSize) else {
            throw .frameTooLarge(length: length, maximum: maximumFrameSize)
        }
        guard frame.fds.count <= ExtSandboxWire.maximumFDsPerFrame else {
            throw .tooManyFDs(kind: frame.kind, count: frame.fds.count, maximum: ExtSandboxWire.maximumFDsPerFrame)
        }
        let header = frame.header
        try header.validate()
        return header
    }

    /// The frame's bytes: length prefix, header, payload. (The fds travel separately, as ancillary
    /// data of the first byte.)
    public func encode(_ frame: Frame) throws(WireError) -> [UInt8] {
        let header = try validate(frame)
        let total = FrameHeader.encodedSize + frame.payloadCount
        return [UInt8](unsafeUninitializedCapacity: total) { buffer, count in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            header.encode(into: raw)
            var offset = FrameHeader.encodedSize
            for part in [frame.payload, frame.payloadTail] {
                part.withUnsafeBytes { bytes in
                    if let base = bytes.baseAddress, bytes.count > 0 {
                        (raw.baseAddress! + offset).copyMemory(from: base, byteCount: bytes.count)
                    }
                }
                offset += part.count
            }
            count = total
        }
    }
}

/// Closes each descriptor, ignoring errors (retrying is wrong on Linux: the fd is gone after EINTR).
@inline(__always)
func closeDescriptors(_ fds: [Int32]) {
    for fd in fds where fd >= 0 { _ = Glibc.close(fd) }
}

extension Frame: CustomStringConvertible {
    /// A short summary: kind, id, payload size, fds (not the payload itself).
    public var description: String {
        var text = "\(kind) id \(id), \(payloadCount) byte\(payloadCount == 1 ? "" : "s")"
        if !fds.isEmpty { text += ", fds \(fdNumbers)" }
        if flags != 0 { text += ", flags 0x\(String(flags, radix: 16))" }
        return text
    }
}
