/// Arguments, results and registered errors travel as ``WireValue``s (docs/wire-protocol.md
/// §12.2 says why not JSON): any `Codable` value, in a format any language can read, decoded
/// with bounded nesting from at most one frame's bytes. File descriptors go through `descriptors`.
enum ValueCoding {
    static func encode<Value: Encodable>(_ value: Value, descriptors: DescriptorTable? = nil) throws -> [UInt8] {
        try WireValueEncoder(descriptors: descriptors).encode(value).serialized()
    }

    static func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8], descriptors: DescriptorTable? = nil) throws -> Value {
        try WireValueDecoder(descriptors: descriptors).decode(type, from: WireValue(parsing: bytes))
    }
}
