import FoundationEssentials

/// A JSON value, read with FoundationEssentials' JSONDecoder (numbers keep all 64 bits).
enum JSONValue: Decodable, Equatable {
    case null
    case bool(Bool)
    case unsigned(UInt64)
    case signed(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let v = try? container.decode(Bool.self) { self = .bool(v) }
        else if let v = try? container.decode(UInt64.self) { self = .unsigned(v) }
        else if let v = try? container.decode(Int64.self) { self = .signed(v) }
        else if let v = try? container.decode(Double.self) { self = .double(v) }
        else if let v = try? container.decode(String.self) { self = .string(v) }
        else if let v = try? container.decode([JSONValue].self) { self = .array(v) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    var string: String? { if case .string(let s) = self { s } else { nil } }
    var object: [String: JSONValue]? { if case .object(let o) = self { o } else { nil } }
    /// An array whose every element is a string (nil otherwise).
    var strings: [String]? {
        guard case .array(let items) = self else { return nil }
        let strings = items.compactMap(\.string)
        return strings.count == items.count ? strings : nil
    }
    /// An array whose every element is an object (nil otherwise).
    var objects: [[String: JSONValue]]? {
        guard case .array(let items) = self else { return nil }
        let objects = items.compactMap(\.object)
        return objects.count == items.count ? objects : nil
    }

    /// The parser's own words for why the text is not JSON.
    static func describe(_ error: any Error) -> String {
        if case DecodingError.dataCorrupted(let context) = error {
            return context.underlyingError.map { "\($0)" } ?? context.debugDescription
        }
        return "\(error)"
    }
}
