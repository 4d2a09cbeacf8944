import Synchronization

/// The `Codable` error types a contract registers (``ExtensionActorSystem/register(error:as:)``):
/// thrown by a remote method, such an error travels as its name and value and is thrown to the
/// caller as itself. Both sides register the same types under the same names.
final class RemoteErrorRegistry: Sendable {
    static let shared = RemoteErrorRegistry()

    private struct Entry: Sendable {
        let name: String
        let encode: @Sendable (any Error) throws -> [UInt8]?
        let decode: @Sendable ([UInt8]) throws -> any Error
    }

    private struct Entries {
        var byName: [String: Entry] = [:]
        var byType: [ObjectIdentifier: Entry] = [:]
    }

    private let entries = Mutex(Entries())

    func register<Failure: Error & Codable>(_ type: Failure.Type, as name: String) {
        precondition(!name.isEmpty && !name.utf8.contains(10), "a registered error's name is not empty and has no line feed")
        let entry = Entry(
            name: name,
            encode: { error in try (error as? Failure).map { try ValueCoding.encode($0) } },
            decode: { bytes in try ValueCoding.decode(Failure.self, from: bytes) })
        entries.withLock { entries in
            entries.byName[name] = entry
            entries.byType[ObjectIdentifier(type)] = entry
        }
    }

    /// The ERROR message for `error` if its type is registered: its name, a line feed, its
    /// encoded value in lowercase hexadecimal (an ERROR's message is UTF-8 text).
    func encode(_ error: any Error) -> String? {
        guard let entry = entries.withLock({ $0.byType[ObjectIdentifier(type(of: error))] }),
              let value = try? entry.encode(error) else { return nil }
        return entry.name + "\n" + Hexadecimal.encode(value)
    }

    /// The registered error a message describes; nil when the name is unknown or its value
    /// does not decode as that type.
    func decode(_ message: String) -> (any Error)? {
        let utf8 = Array(message.utf8)
        guard let newline = utf8.firstIndex(of: 10) else { return nil }
        let name = String(decoding: utf8[..<newline], as: UTF8.self)
        guard let entry = entries.withLock({ $0.byName[name] }),
              let value = Hexadecimal.decode(utf8[(newline + 1)...]) else { return nil }
        return try? entry.decode(value)
    }
}

/// Lowercase hexadecimal, for bytes inside an ERROR's UTF-8 message.
enum Hexadecimal {
    private static let digits = Array("0123456789abcdef".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func decode(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        guard text.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.count / 2)
        var high: UInt8?
        for character in text {
            guard let nibble = digits.firstIndex(of: character).map(UInt8.init) else { return nil }
            if let first = high {
                bytes.append(first << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        return bytes
    }
}
