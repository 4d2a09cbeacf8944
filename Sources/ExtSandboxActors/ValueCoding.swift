/// Arguments, results and registered errors travel as ``WireValue``s (docs/wire-protocol.md
/// §12.2 says why not JSON): any `Codable` value, in a format any language can read, decoded
/// with bounded nesting from at most one frame's bytes.
enum ValueCoding {
    static func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        try WireValueEncoder().encode(value).serialized()
    }

    static func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try WireValueDecoder().decode(type, from: WireValue(parsing: bytes))
    }
}
