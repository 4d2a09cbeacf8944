@_spi(Fuzzing) @testable import ExtSandboxActors
import Testing

@Suite("The call envelope and the value encoding, byte for byte (docs/wire-protocol.md §12)")
struct EnvelopeCodingTests {
    struct Options: Codable, Equatable {
        var shout: Bool
        var limit: Int?
        var tags: [String]
    }

    @Test("the envelope example of the document")
    func envelopeExample() throws {
        let envelope = CallEnvelope(target: "extension", method: "$s4Demo11$TextFilterC5applyyS2SYaKFTE", arguments: [[6, 0, 0, 0, 2, 0x68, 0x69]])
        let bytes = try envelope.encoded()
        let expected: [UInt8] = [1, 0, 0, 9] + Array("extension".utf8) + [0, 37] + Array("$s4Demo11$TextFilterC5applyyS2SYaKFTE".utf8)
            + [0, 1, 0, 0, 0, 7, 6, 0, 0, 0, 2, 0x68, 0x69]
        #expect(bytes == expected)
        #expect(try CallEnvelope(decoding: bytes) == envelope)
    }

    @Test("values: the document's examples, and a round trip of a struct with an optional and an array")
    func values() throws {
        #expect(try ValueCoding.encode("hi") == [6, 0, 0, 0, 2, 0x68, 0x69])
        #expect(try ValueCoding.encode(-2) == [3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe])
        #expect(try ValueCoding.encode([UInt8]([1, 2])) == [7, 0, 0, 0, 2, 1, 2])
        #expect(try ValueCoding.encode(Options(shout: true, limit: nil, tags: ["a"]))
            == [9, 0, 0, 0, 2, 0, 0, 0, 5] + Array("shout".utf8) + [2, 0, 0, 0, 4] + Array("tags".utf8) + [8, 0, 0, 0, 1, 6, 0, 0, 0, 1, 0x61])
        let options = Options(shout: false, limit: 3, tags: ["x", "y"])
        #expect(try ValueCoding.decode(Options.self, from: ValueCoding.encode(options)) == options)
        #expect(try ValueCoding.decode([UInt8].self, from: ValueCoding.encode([UInt8](repeating: 7, count: 1000))) == [UInt8](repeating: 7, count: 1000))
        #expect(try ValueCoding.decode(UInt8.self, from: ValueCoding.encode(255)) == 255)
        #expect(throws: (any Error).self) { try ValueCoding.decode(UInt8.self, from: ValueCoding.encode(256)) }
    }

    /// A map of `fields` (each a key and an integer) as the format writes one.
    static func map(_ fields: [(String, Int)]) -> [UInt8] {
        var bytes: [UInt8] = [9, 0, 0, 0, UInt8(fields.count)]
        for (key, value) in fields {
            bytes += [0, 0, 0, UInt8(key.utf8.count)] + Array(key.utf8) + [4, 0, 0, 0, 0, 0, 0, 0, UInt8(value)]
        }
        return bytes
    }

    struct Wide: Codable, Equatable {
        var a, b, c, d, e, f, g, h, i, j: Int
    }

    @Test("a map's keys are found in any order and a duplicate key is refused, in a small map and a large one")
    func mapKeys() throws {
        struct Pair: Codable, Equatable { var first: Int; var second: Int? }
        #expect(try ValueCoding.decode(Pair.self, from: Self.map([("second", 2), ("first", 1)])) == Pair(first: 1, second: 2))
        #expect(try ValueCoding.decode(Pair.self, from: Self.map([("first", 1), ("other", 9)])) == Pair(first: 1, second: nil))
        let names = ["j", "i", "h", "g", "f", "e", "d", "c", "b", "a"]
        let wide = Self.map(names.enumerated().map { ($1, $0) })
        #expect(try ValueCoding.decode(Wide.self, from: wide) == Wide(a: 9, b: 8, c: 7, d: 6, e: 5, f: 4, g: 3, h: 2, i: 1, j: 0))
        let duplicate: (any Error) -> Bool = { "\($0)".contains("appears twice") }
        #expect(performing: { try ValueCoding.decode(Pair.self, from: Self.map([("first", 1), ("second", 2), ("first", 3)])) }, throws: duplicate)
        #expect(performing: { try ValueCoding.decode(Wide.self, from: Self.map(names.map { ($0, 0) } + [("e", 1)])) }, throws: duplicate)
        #expect(try ValueCoding.decode(String.self, from: ValueCoding.encode("straight")) == "straight")
        #expect(throws: (any Error).self) { try ValueCoding.decode(String.self, from: ValueCoding.encode(1)) }
    }

    @Test("a field that does not decode is named by its whole path: a number too large, a wrong kind, nested")
    func fieldErrorsNameTheirPath() throws {
        struct Sent: Codable { var inner: SentInner }
        struct SentInner: Codable { var count: Int; var flag: String; var ratio: String }
        struct Expected: Codable { var inner: ExpectedInner }
        struct ExpectedInner: Codable { var count: UInt8; var flag: Bool; var ratio: Double }
        func path(of error: any Error) -> [String] {
            let context: DecodingError.Context? = switch error as? DecodingError {
            case .dataCorrupted(let context)?, .typeMismatch(_, let context)?: context
            default: nil
            }
            return context?.codingPath.map(\.stringValue) ?? []
        }
        for (sent, field) in [(SentInner(count: 300, flag: "yes", ratio: "x"), "count"),
                              (SentInner(count: 3, flag: "yes", ratio: "x"), "flag")] {
            #expect(performing: { try ValueCoding.decode(Expected.self, from: ValueCoding.encode(Sent(inner: sent))) },
                    throws: { path(of: $0) == ["inner", field] })
        }
        struct Flat: Codable { var count: Int; var flag: Bool; var ratio: String }
        struct FlatExpected: Codable { var count: Int; var flag: Bool; var ratio: Double }
        #expect(performing: { try ValueCoding.decode(FlatExpected.self, from: ValueCoding.encode(Flat(count: 1, flag: true, ratio: "x"))) },
                throws: { path(of: $0) == ["ratio"] })
    }

    @Test("malformed envelopes are refused with the field that is wrong", arguments: [
        ([], "version"),
        ([2, 0], "version 2"),
        ([1, 1], "flags"),
        ([1, 0, 0, 0], "target of 0 bytes"),
        ([1, 0, 1, 0], "target of 256 bytes"),
        ([1, 0, 0, 1, 0x61, 0, 1, 0x62, 0, 65], "65 arguments"),
        ([1, 0, 0, 1, 0x61, 0, 1, 0x62, 0, 1, 0xff, 0xff, 0xff, 0xff], "argument 0 needs 4294967295 bytes"),
        ([1, 0, 0, 1, 0xff, 0, 1, 0x62, 0, 0], "target is not UTF-8"),
        ([1, 0, 0, 1, 0x61, 0, 1, 0x62, 0, 0, 0], "1 bytes after the last argument"),
    ] as [([UInt8], String)])
    func malformedEnvelopes(bytes: [UInt8], reason: String) {
        #expect {
            _ = try CallEnvelope(decoding: bytes)
        } throws: { error in
            (error as? CallEnvelope.FormatError)?.reason.contains(reason) == true
        }
    }

    @Test("malformed values are refused: lying counts, deep nesting, unknown tags, trailing bytes")
    func malformedValues() {
        let deep: [UInt8] = Array(Array(repeating: [8, 0, 0, 0, 1] as [UInt8], count: 100).joined()) + [0]
        let cases: [[UInt8]] = [[8, 0xff, 0xff, 0xff, 0xff], [9, 0, 0, 1, 0, 0], deep, [42], [0, 0], [6, 0, 0, 0, 1, 0xff], []]
        for bytes in cases {
            #expect(throws: CallEnvelope.FormatError.self) { _ = try WireValue(parsing: bytes[...]) }
        }
    }
}
