/// Arguments, results and registered errors travel as ``WireValue``s (docs/wire-protocol.md
/// §12.2 says why not JSON): any `Codable` value, in a format any language can read, decoded
/// with bounded nesting from at most one frame's bytes. File descriptors go through `descriptors`.
public enum ValueCoding {
    /// A value's bytes as a call carries them (without file descriptors: those need a call).
    public static func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        try encode(value, descriptors: nil)
    }

    /// Reads a value a call carried, refusing what the format does not allow.
    public static func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try decode(type, from: bytes[...], descriptors: nil)
    }

    /// Checks that `bytes` are exactly one value of the format, of any shape (a peer's answer
    /// read without knowing its type), refusing what a decoder would refuse before any type.
    public static func validate(_ bytes: [UInt8]) throws(CallEnvelope.FormatError) {
        _ = try WireValue(parsing: bytes[...])
    }

    static func encode<Value: Encodable>(_ value: Value, descriptors: DescriptorTable?) throws -> [UInt8] {
        try WireValueEncoder(descriptors: descriptors).encode(value).serialized()
    }

    static func decode<Value: Decodable>(_ type: Value.Type, from bytes: ArraySlice<UInt8>, descriptors: DescriptorTable?) throws -> Value {
        try WireValueDecoder(descriptors: descriptors).decode(type, from: WireValue(parsing: bytes))
    }

    /// A byte array's value whose bytes are `bytes` (received apart: a `[UInt8]` takes them as they are).
    static func decode<Value: Decodable>(_ type: Value.Type, fromByteArray bytes: [UInt8], descriptors: DescriptorTable?) throws -> Value {
        try WireValueDecoder(descriptors: descriptors).decode(type, from: .bytes(bytes))
    }
}
