@_spi(Fuzzing) import ExtSandboxActors

/// Fuzz entry point of the distributed calls' decoding (ExtSandboxActors): what a peer puts in a
/// REQUEST or a REPLY.
public enum ActorsFuzzing {
    struct Options: Codable {
        var shout: Bool
        var limit: Int?
        var tags: [String]
    }

    enum Failure: Error, Codable {
        case tooLong(limit: Int)
        case refused(reason: String, codes: [UInt16])
    }

    /// Input: a call envelope (docs/wire-protocol.md §12.1).
    ///
    /// Properties: neither the envelope's decoder nor the value decoder crashes or traps; an
    /// envelope that decodes encodes back to exactly its bytes; each argument that parses as a
    /// value serializes back to exactly its bytes; decoding it as a string, bytes, an integer, an
    /// optional, a struct, an enum with payloads or a dictionary returns or throws, and what
    /// decodes encodes again. The input itself parsed as a value too (a REPLY's payload). Where a
    /// receiver would split the input (its last argument's byte array read apart), the two parts
    /// decode exactly when the whole does, and encode back to the input.
    public static func callEnvelope(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        checkValue(bytes)
        let tailCount = CallEnvelope.trailingByteCount(payloadCount: bytes.count, prefix: input)
        require((0...bytes.count).contains(tailCount), "the split point is outside the payload")
        let split = tailCount == 0 ? nil : try? CallEnvelope(decoding: Array(bytes.dropLast(tailCount)), followedBy: Array(bytes.suffix(tailCount)))
        guard let envelope = try? CallEnvelope(decoding: bytes) else {
            require(split == nil, "an envelope decodes in two parts but not whole")
            return
        }
        if tailCount > 0 {
            guard let split else { fatalError("fuzz property violated: an envelope decodes whole but not in two parts") }
            require((try? split.encoded()) == bytes, "an envelope in two parts re-encodes to other bytes")
        }
        let again: [UInt8]
        do { again = try envelope.encoded() } catch {
            fatalError("fuzz property violated: a decoded envelope does not encode: \(error)")
        }
        require(again == bytes, "the envelope re-encodes to other bytes")
        for argument in envelope.arguments { checkValue(Array(argument)) }
    }

    static func checkValue(_ bytes: [UInt8]) {
        guard let value = try? WireValue(parsing: bytes[...]) else { return }
        require(value.serialized() == bytes, "a value re-serializes to other bytes")
        roundTrip(String.self, bytes)
        roundTrip([UInt8].self, bytes)
        roundTrip(Int8.self, bytes)
        roundTrip(UInt64.self, bytes)
        roundTrip(Double?.self, bytes)
        roundTrip(Options.self, bytes)
        roundTrip(Failure.self, bytes)
        roundTrip([String: Int].self, bytes)
        roundTrip([[Bool]].self, bytes)
    }

    /// Decodes `bytes` as `type` if it can; what decodes must encode and decode again.
    static func roundTrip<Value: Codable>(_ type: Value.Type, _ bytes: [UInt8]) {
        guard let value = try? ValueCoding.decode(type, from: bytes) else { return }
        guard let encoded = try? ValueCoding.encode(value) else {
            fatalError("fuzz property violated: a decoded \(type) does not encode")
        }
        require((try? ValueCoding.decode(type, from: encoded)) != nil, "a re-encoded \(type) does not decode")
    }
}
