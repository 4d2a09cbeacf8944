/// Encodes any `Encodable` value as a ``WireValue``: keyed containers become maps, unkeyed
/// ones arrays, `[UInt8]` bytes (as it is, not one value per byte).
struct WireValueEncoder {
    /// Where ``TransferredFileDescriptor`` values attach their copies (none: they cannot be encoded).
    var descriptors: DescriptorTable?

    func encode<Value: Encodable>(_ value: Value) throws -> WireValue {
        // A string or byte array, the commonest arguments and results, needs no node.
        if Value.self == String.self, let text = value as? String { return .string(text) }
        if Value.self == [UInt8].self, let bytes = value as? [UInt8] { return .bytes(bytes) }
        let node = EncodingNode(descriptors: descriptors)
        try node.store(value, codingPath: [])
        return node.resolved()
    }
}

/// One value being encoded; nested containers are nodes resolved at the end.
final class EncodingNode {
    enum Content {
        case none
        case value(WireValue)
        case map([(key: String, node: EncodingNode)])
        case array([EncodingNode])
    }

    var content = Content.none
    let descriptors: DescriptorTable?

    init(_ value: WireValue? = nil, descriptors: DescriptorTable? = nil) {
        self.descriptors = descriptors
        if let value { content = .value(value) }
    }

    func child() -> EncodingNode { EncodingNode(descriptors: descriptors) }

    func resolved() -> WireValue {
        switch content {
        case .none: .map([])
        case .value(let value): value
        case .map(let entries): .map(entries.map { ($0.key, $0.node.resolved()) })
        case .array(let nodes): .array(nodes.map { $0.resolved() })
        }
    }

    func store<Value: Encodable>(_ value: Value, codingPath: [any CodingKey]) throws {
        // Compared by type first: a dynamic cast that fails costs more than encoding a small value.
        if Value.self == [UInt8].self, let bytes = value as? [UInt8] {
            content = .value(.bytes(bytes))
        } else if Value.self == String.self, let text = value as? String {
            // Stored straight: through `encode(to:)` it costs a boxed container per value.
            content = .value(.string(text))
        } else if Value.self == TransferredFileDescriptor.self, let descriptor = value as? TransferredFileDescriptor, let descriptors {
            content = .value(.descriptor(try descriptors.attach(descriptor)))
        } else {
            try value.encode(to: NodeEncoder(node: self, codingPath: codingPath))
        }
    }

    func append(key: String, _ child: EncodingNode) {
        if case .map(var entries) = content {
            content = .none
            entries.append((key, child))
            content = .map(entries)
        } else {
            content = .map([(key, child)])
        }
    }

    func append(_ child: EncodingNode) {
        if case .array(var nodes) = content {
            content = .none
            nodes.append(child)
            content = .array(nodes)
        } else {
            content = .array([child])
        }
    }

    var count: Int {
        if case .array(let nodes) = content { return nodes.count }
        return 0
    }
}

struct NodeEncoder: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .map = node.content {} else { node.content = .map([]) }
        return KeyedEncodingContainer(KeyedNodeContainer(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = node.content {} else { node.content = .array([]) }
        return UnkeyedNodeContainer(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleNodeContainer(node: node, codingPath: codingPath)
    }
}

struct KeyedNodeContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    private func put(_ value: WireValue, _ key: Key) { node.append(key: key.stringValue, EncodingNode(value)) }

    mutating func encodeNil(forKey key: Key) throws { put(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { put(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { put(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { put(.double(value), key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { put(.double(Double(value)), key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { put(.int(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { put(.uint(value), key) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        let child = node.child()
        node.append(key: key.stringValue, child)
        try child.store(value, codingPath: codingPath + [key])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let child = node.child()
        node.append(key: key.stringValue, child)
        return NodeEncoder(node: child, codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = node.child()
        node.append(key: key.stringValue, child)
        return NodeEncoder(node: child, codingPath: codingPath + [key]).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { superEncoder(named: "super") }
    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(named: key.stringValue) }

    private func superEncoder(named name: String) -> any Encoder {
        let child = node.child()
        node.append(key: name, child)
        return NodeEncoder(node: child, codingPath: codingPath)
    }
}

/// What an unkeyed and a single-value container share: every primitive becomes one value, put
/// where the container puts values (appended to a list, or as the node's content).
protocol PrimitiveValuePutting {
    func put(_ value: WireValue)
}

extension PrimitiveValuePutting {
    func encodeNil() throws { put(.null) }
    func encode(_ value: Bool) throws { put(.bool(value)) }
    func encode(_ value: String) throws { put(.string(value)) }
    func encode(_ value: Double) throws { put(.double(value)) }
    func encode(_ value: Float) throws { put(.double(Double(value))) }
    func encode(_ value: Int) throws { put(.int(Int64(value))) }
    func encode(_ value: Int8) throws { put(.int(Int64(value))) }
    func encode(_ value: Int16) throws { put(.int(Int64(value))) }
    func encode(_ value: Int32) throws { put(.int(Int64(value))) }
    func encode(_ value: Int64) throws { put(.int(value)) }
    func encode(_ value: UInt) throws { put(.uint(UInt64(value))) }
    func encode(_ value: UInt8) throws { put(.uint(UInt64(value))) }
    func encode(_ value: UInt16) throws { put(.uint(UInt64(value))) }
    func encode(_ value: UInt32) throws { put(.uint(UInt64(value))) }
    func encode(_ value: UInt64) throws { put(.uint(value)) }
}

struct UnkeyedNodeContainer: UnkeyedEncodingContainer, PrimitiveValuePutting {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var count: Int { node.count }

    func put(_ value: WireValue) { node.append(EncodingNode(value)) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = node.child()
        node.append(child)
        try child.store(value, codingPath: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = node.child()
        node.append(child)
        return NodeEncoder(node: child, codingPath: codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = node.child()
        node.append(child)
        return NodeEncoder(node: child, codingPath: codingPath).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        let child = node.child()
        node.append(child)
        return NodeEncoder(node: child, codingPath: codingPath)
    }
}

struct SingleNodeContainer: SingleValueEncodingContainer, PrimitiveValuePutting {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    func put(_ value: WireValue) { node.content = .value(value) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try node.store(value, codingPath: codingPath)
    }
}
