/// An ERROR frame's code: the first 4 payload bytes (big-endian).
///
/// Codes 1–6 are defined by the protocol, 7–99 are reserved, 100 and above are for applications.
public struct ErrorCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// 1: the extension rejected the connection (handshake) or the request.
    public static let rejected = ErrorCode(rawValue: 1)
    /// 2: the receiver does not know this request (no handler for it).
    public static let unknownRequest = ErrorCode(rawValue: 2)
    /// 3: the request was cancelled (answer to a CANCEL).
    public static let cancelled = ErrorCode(rawValue: 3)
    /// 4: protocol error (e.g. version mismatch in the handshake, malformed frame); the sender closes.
    public static let protocolError = ErrorCode(rawValue: 4)
    /// 5: the handler failed in an unexpected way.
    public static let internalError = ErrorCode(rawValue: 5)
    /// 6: too large (a frame over the peer's maximum, or a request the handler refuses for its size).
    public static let tooLarge = ErrorCode(rawValue: 6)
    /// The first application-defined code.
    public static let firstApplicationCode: UInt32 = 100

    /// An application-defined code: `100 + offset`.
    public static func application(_ offset: UInt32) -> ErrorCode { ErrorCode(rawValue: 100 + offset) }

    /// Whether the code is application-defined (100 or more).
    public var isApplicationDefined: Bool { rawValue >= Self.firstApplicationCode }

    public var description: String {
        switch rawValue {
        case 1: "1 (rejected)"
        case 2: "2 (unknown request)"
        case 3: "3 (cancelled)"
        case 4: "4 (protocol error)"
        case 5: "5 (internal error)"
        case 6: "6 (too large)"
        default: "\(rawValue)"
        }
    }
}

/// The payload of an ERROR frame: `u32 code` (big-endian), then the UTF-8 message (may be empty).
public struct ErrorPayload: Sendable, Hashable {
    public var code: ErrorCode
    public var message: String

    public init(code: ErrorCode, message: String = "") {
        self.code = code
        self.message = message
    }

    /// Parses an ERROR payload. Throws ``WireError/malformedPayload(kind:reason:)`` if it is shorter
    /// than 4 bytes or the message is not valid UTF-8.
    public init(payload: [UInt8]) throws(WireError) {
        guard payload.count >= 4 else {
            throw .malformedPayload(kind: .error, reason: "\(payload.count) bytes, the code alone takes 4")
        }
        code = ErrorCode(rawValue: readBigEndian(payload, at: 0, as: UInt32.self))
        message = try decodeUTF8(payload[4...], kind: .error, what: "message")
    }

    /// The encoded payload.
    public var payload: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(4 + message.utf8.count)
        appendBigEndian(code.rawValue, to: &bytes)
        bytes.append(contentsOf: message.utf8)
        return bytes
    }
}

/// The payload of a HELLO frame: `u16 version`, `u32 maximum frame size` (both big-endian), then
/// the UTF-8 of an optional name (empty = no name).
public struct Hello: Sendable, Hashable {
    /// The protocol version; this implementation speaks ``ExtSandboxWire/protocolVersion`` (1).
    public var version: UInt16
    /// The largest frame (length field: header plus payload) the sender of this HELLO accepts. The
    /// peer must not send larger frames. At least ``ExtSandboxWire/minimumMaximumFrameSize``.
    public var maximumFrameSize: UInt32
    /// An optional name: the host's name for the connection, the extension's identifier.
    public var name: String?

    public init(version: UInt16 = ExtSandboxWire.protocolVersion,
                maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize,
                name: String? = nil) {
        self.version = version
        self.maximumFrameSize = maximumFrameSize
        self.name = name
    }

    /// Parses a HELLO payload. Throws ``WireError/malformedPayload(kind:reason:)`` if it is shorter
    /// than 6 bytes, advertises a maximum frame size below 4096, or the name is not valid UTF-8.
    /// The version is not checked here: see ``checkVersion()``.
    public init(payload: [UInt8]) throws(WireError) {
        guard payload.count >= 6 else {
            throw .malformedPayload(kind: .hello, reason: "\(payload.count) bytes, version and maximum frame size take 6")
        }
        version = readBigEndian(payload, at: 0, as: UInt16.self)
        maximumFrameSize = readBigEndian(payload, at: 2, as: UInt32.self)
        guard maximumFrameSize >= ExtSandboxWire.minimumMaximumFrameSize else {
            throw .malformedPayload(
                kind: .hello,
                reason: "maximum frame size \(maximumFrameSize) is below the minimum \(ExtSandboxWire.minimumMaximumFrameSize)")
        }
        let name = try decodeUTF8(payload[6...], kind: .hello, what: "name")
        self.name = name.isEmpty ? nil : name
    }

    /// Throws ``WireError/unsupportedVersion(_:supported:)`` unless ``version`` is the one this
    /// implementation speaks.
    public func checkVersion() throws(WireError) {
        guard version == ExtSandboxWire.protocolVersion else {
            throw .unsupportedVersion(version, supported: ExtSandboxWire.protocolVersion)
        }
    }

    /// The encoded payload.
    public var payload: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(6 + (name?.utf8.count ?? 0))
        appendBigEndian(version, to: &bytes)
        appendBigEndian(maximumFrameSize, to: &bytes)
        if let name { bytes.append(contentsOf: name.utf8) }
        return bytes
    }
}

// MARK: - Byte helpers

@inline(__always)
func readBigEndian<T: FixedWidthInteger>(_ bytes: [UInt8], at offset: Int, as: T.Type) -> T {
    bytes.withUnsafeBytes { T(bigEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
}

@inline(__always)
func appendBigEndian<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
}

func decodeUTF8(_ bytes: ArraySlice<UInt8>, kind: FrameKind, what: String) throws(WireError) -> String {
    guard let string = String(validating: bytes, as: UTF8.self) else {
        throw .malformedPayload(kind: kind, reason: "the \(what) is not valid UTF-8")
    }
    return string
}
