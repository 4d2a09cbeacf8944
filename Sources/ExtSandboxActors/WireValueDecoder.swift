/// Decodes any `Decodable` value from a ``WireValue``. Integers decode into any integer type
/// they fit exactly; a map's keys are looked up by name (a duplicate key is refused).
struct WireValueDecoder {
    /// The received descriptors ``TransferredFileDescriptor`` values take (none: they cannot be decoded).
    var descriptors: DescriptorTable?

    func decode<Value: Decodable>(_ type: Value.Type, from value: WireValue) throws -> Value {
        try ValueReading.decode(type, from: value, codingPath: [], descriptors: descriptors)
    }
}

enum ValueReading {
    static func decode<Value: Decodable>(_ type: Value.Type, from value: WireValue, codingPath: [any CodingKey],
                                         descriptors: DescriptorTable?) throws -> Value {
        if type == [UInt8].self, case .bytes(let bytes) = value { return bytes as! Value }
        // A string read straight: through `String(from:)` it costs a boxed container per value.
        if type == String.self, case .string(let text) = value { return text as! Value }
        if type == TransferredFileDescriptor.self, let descriptors {
            guard case .descriptor(let index) = value else { throw mismatch("a file descriptor", value, codingPath) }
            return try descriptors.take(index) as! Value
        }
        return try Value(from: NodeDecoder(value: value, codingPath: codingPath, descriptors: descriptors))
    }

    static func mismatch(_ expected: String, _ value: WireValue, _ codingPath: [any CodingKey]) -> DecodingError {
        .typeMismatch(Any.self, .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(kind(of: value))"))
    }

    static func kind(of value: WireValue) -> String {
        switch value {
        case .null: "null"
        case .bool: "a boolean"
        case .int, .uint: "an integer"
        case .double: "a floating-point number"
        case .string: "a string"
        case .bytes: "bytes"
        case .array: "an array"
        case .map: "a map"
        case .descriptor: "a file descriptor"
        }
    }

    // The coding path is only made for an error: a keyed container's costs an array per field.
    static func integer<T: FixedWidthInteger>(_ type: T.Type, _ value: WireValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> T {
        let result: T? = switch value {
        case .int(let integer): T(exactly: integer)
        case .uint(let integer): T(exactly: integer)
        default: throw mismatch("an integer", value, codingPath())
        }
        guard let result else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath(), debugDescription: "the integer does not fit \(T.self)"))
        }
        return result
    }

    static func double(_ value: WireValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Double {
        switch value {
        case .double(let number): number
        case .int(let integer): Double(integer)
        case .uint(let integer): Double(integer)
        default: throw mismatch("a number", value, codingPath())
        }
    }

    static func bool(_ value: WireValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch("a boolean", value, codingPath()) }
        return flag
    }

    static func string(_ value: WireValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> String {
        guard case .string(let text) = value else { throw mismatch("a string", value, codingPath()) }
        return text
    }
}

struct NodeDecoder: Decoder {
    let value: WireValue
    let codingPath: [any CodingKey]
    let descriptors: DescriptorTable?
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .map(let entries) = value else { throw ValueReading.mismatch("a map", value, codingPath) }
        return KeyedDecodingContainer(try KeyedValueContainer(entries: entries, codingPath: codingPath, descriptors: descriptors))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        switch value {
        case .array(let values): return UnkeyedValueContainer(values: values, codingPath: codingPath, descriptors: descriptors)
        case .bytes(let bytes): return UnkeyedValueContainer(values: bytes.map { .uint(UInt64($0)) }, codingPath: codingPath, descriptors: descriptors)
        default: throw ValueReading.mismatch("an array", value, codingPath)
        }
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleValueContainer(value: value, codingPath: codingPath, descriptors: descriptors)
    }
}

struct KeyedValueContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    /// The map's entries, looked up one by one while there are few (a struct's fields: cheaper
    /// than hashing every key into a dictionary), through `positions` past that.
    private let entries: [(key: String, value: WireValue)]
    private let positions: [String: Int]?
    let codingPath: [any CodingKey]
    let descriptors: DescriptorTable?

    private static var mostSearched: Int { 8 }

    /// Refuses a map with a duplicate key.
    init(entries: [(key: String, value: WireValue)], codingPath: [any CodingKey], descriptors: DescriptorTable?) throws {
        self.entries = entries
        self.codingPath = codingPath
        self.descriptors = descriptors
        func duplicate(_ key: String) -> DecodingError {
            .dataCorrupted(.init(codingPath: codingPath, debugDescription: "key \(key) appears twice"))
        }
        if entries.count <= Self.mostSearched {
            positions = nil
            for (position, entry) in entries.enumerated() where entries[..<position].contains(where: { $0.key == entry.key }) {
                throw duplicate(entry.key)
            }
        } else {
            var positions: [String: Int] = [:]
            positions.reserveCapacity(entries.count)
            for (position, entry) in entries.enumerated() where positions.updateValue(position, forKey: entry.key) != nil {
                throw duplicate(entry.key)
            }
            self.positions = positions
        }
    }

    private func entry(_ key: String) -> WireValue? {
        if let positions { return positions[key].map { entries[$0].value } }
        return entries.first { $0.key == key }?.value
    }

    var allKeys: [Key] { entries.compactMap { Key(stringValue: $0.key) } }

    func contains(_ key: Key) -> Bool { entry(key.stringValue) != nil }

    private func value(_ key: Key) throws -> WireValue {
        guard let value = entry(key.stringValue) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for \(key.stringValue)"))
        }
        return value
    }

    private func path(_ key: Key) -> [any CodingKey] { codingPath + [key] }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key) == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try ValueReading.bool(value(key), path(key)) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try ValueReading.string(value(key), path(key)) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try ValueReading.double(value(key), path(key)) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try ValueReading.double(value(key), path(key))) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try ValueReading.integer(type, value(key), path(key)) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try ValueReading.integer(type, value(key), path(key)) }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try ValueReading.decode(type, from: value(key), codingPath: path(key), descriptors: descriptors)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try NodeDecoder(value: value(key), codingPath: path(key), descriptors: descriptors).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try NodeDecoder(value: value(key), codingPath: path(key), descriptors: descriptors).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        NodeDecoder(value: entry("super") ?? .null, codingPath: codingPath, descriptors: descriptors)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        NodeDecoder(value: entry(key.stringValue) ?? .null, codingPath: path(key), descriptors: descriptors)
    }
}

struct UnkeyedValueContainer: UnkeyedDecodingContainer {
    let values: [WireValue]
    let codingPath: [any CodingKey]
    let descriptors: DescriptorTable?
    private(set) var currentIndex = 0

    init(values: [WireValue], codingPath: [any CodingKey], descriptors: DescriptorTable?) {
        self.values = values
        self.codingPath = codingPath
        self.descriptors = descriptors
    }

    var count: Int? { values.count }
    var isAtEnd: Bool { currentIndex >= values.count }

    private mutating func next() throws -> WireValue {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "the array has only \(values.count) elements"))
        }
        defer { currentIndex += 1 }
        return values[currentIndex]
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, values[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try ValueReading.bool(next(), codingPath) }
    mutating func decode(_ type: String.Type) throws -> String { try ValueReading.string(next(), codingPath) }
    mutating func decode(_ type: Double.Type) throws -> Double { try ValueReading.double(next(), codingPath) }
    mutating func decode(_ type: Float.Type) throws -> Float { Float(try ValueReading.double(next(), codingPath)) }
    mutating func decode(_ type: Int.Type) throws -> Int { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try ValueReading.integer(type, next(), codingPath) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try ValueReading.integer(type, next(), codingPath) }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try ValueReading.decode(type, from: next(), codingPath: codingPath, descriptors: descriptors)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try NodeDecoder(value: next(), codingPath: codingPath, descriptors: descriptors).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try NodeDecoder(value: next(), codingPath: codingPath, descriptors: descriptors).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        NodeDecoder(value: try next(), codingPath: codingPath, descriptors: descriptors)
    }
}

struct SingleValueContainer: SingleValueDecodingContainer {
    let value: WireValue
    let codingPath: [any CodingKey]
    let descriptors: DescriptorTable?

    func decodeNil() -> Bool { value == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try ValueReading.bool(value, codingPath) }
    func decode(_ type: String.Type) throws -> String { try ValueReading.string(value, codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try ValueReading.double(value, codingPath) }
    func decode(_ type: Float.Type) throws -> Float { Float(try ValueReading.double(value, codingPath)) }
    func decode(_ type: Int.Type) throws -> Int { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try ValueReading.integer(type, value, codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try ValueReading.integer(type, value, codingPath) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try ValueReading.decode(type, from: value, codingPath: codingPath, descriptors: descriptors)
    }
}
