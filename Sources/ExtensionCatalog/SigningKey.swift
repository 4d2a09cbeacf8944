import CCrypto
import Glibc
import SandboxSystem

/// A developer's public Ed25519 key, which names the signer of a bundle: written
/// `ed25519:` and its 32 bytes in 64 lowercase hex digits (docs/signatures.md). The key is short
/// enough to be its own fingerprint, so approvals pin the key itself.
public struct SignerKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The raw public key (RFC 8032), 32 bytes.
    public var bytes: [UInt8]

    public static let prefix = "ed25519:"

    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// Reads `ed25519:<64 lowercase hex>`; anything else is `nil`.
    public init?(_ text: some StringProtocol) {
        guard text.hasPrefix(Self.prefix), let bytes = Hex.decode(text.dropFirst(Self.prefix.count)), bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    public var description: String { Self.prefix + Hex.encode(bytes) }

    public static func < (a: SignerKey, b: SignerKey) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    /// Whether `signature` (64 bytes) is this key's Ed25519 signature of `message`.
    public func verifies(_ signature: [UInt8], of message: [UInt8]) -> Bool {
        guard signature.count == 64,
              let key = bytes.withUnsafeBufferPointer({ EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, $0.baseAddress, 32) }) else {
            return false
        }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        // Ed25519 hashes the message itself: no digest is given (NULL), and the message is passed whole.
        guard EVP_DigestVerifyInit(context, nil, nil, nil, key) == 1 else { return false }
        return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }
}

/// A developer's private Ed25519 key (its 32-byte seed), kept in a key file:
///
/// ```
/// # extsandbox signing key: keep it secret
/// extsandbox-signing-key 1
/// seed <64 lowercase hex>
/// public ed25519:<64 lowercase hex>
/// ```
public struct SigningKey: Sendable {
    var seed: [UInt8]
    public let publicKey: SignerKey

    static let header = "extsandbox-signing-key 1"
    /// Key files are small; anything larger is not one.
    static let maximumSize = 4096

    /// The key whose seed (RFC 8032's private key) is `seed`.
    public init?(seed: [UInt8]) {
        guard seed.count == 32, let key = Self.privateKey(seed) else { return nil }
        defer { EVP_PKEY_free(key) }
        var publicBytes = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_get_raw_public_key(key, &publicBytes, &length) == 1, length == 32, let publicKey = SignerKey(bytes: publicBytes) else {
            return nil
        }
        self.seed = seed
        self.publicKey = publicKey
    }

    /// A new key from the system's random source (`getrandom`).
    public static func generate() -> SigningKey {
        var random = SystemRandomNumberGenerator()
        while true {
            let seed = (0..<32).map { _ in UInt8.random(in: 0 ... .max, using: &random) }
            if let key = SigningKey(seed: seed) { return key }
        }
    }

    /// The key file's text.
    public func rendered() -> String {
        """
        # extsandbox signing key: keep it secret (docs/signatures.md)
        \(Self.header)
        seed \(Hex.encode(seed))
        public \(publicKey)

        """
    }

    /// Parses a key file; `path` names it in errors. The `public` line, when present, must be
    /// the seed's public key (a file edited by hand is refused rather than signing with another key).
    public static func parse(_ text: String, path: String) throws(CatalogProblem) -> SigningKey {
        var sawHeader = false
        var key: SigningKey?
        var declaredPublic: (SignerKey, Int)?
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = index + 1
            let trimmed = raw.trimmingSpaces
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            guard sawHeader else {
                guard trimmed == header else { throw CatalogProblem(.broken, file: path, line: line, "expected '\(header)', found another line (not a key file?)") }
                sawHeader = true
                continue
            }
            let words = trimmed.split(separator: " ")
            switch (words.first, words.count) {
            case ("seed", 2) where key == nil:
                guard let seed = Hex.decode(words[1]), let parsed = SigningKey(seed: seed) else {
                    throw CatalogProblem(.broken, file: path, line: line, "expected 'seed' and 64 lowercase hex digits")
                }
                key = parsed
            case ("public", 2) where declaredPublic == nil:
                guard let publicKey = SignerKey(words[1]) else {
                    throw CatalogProblem(.broken, file: path, line: line, "expected 'public ed25519:' and 64 lowercase hex digits")
                }
                declaredPublic = (publicKey, line)
            default:
                throw CatalogProblem(.broken, file: path, line: line, "unexpected line (a key file has one 'seed' line and one 'public' line)")
            }
        }
        guard let key else { throw CatalogProblem(.broken, file: path, line: 0, sawHeader ? "no 'seed' line" : "empty: expected '\(header)'") }
        if let (declared, line) = declaredPublic, declared != key.publicKey {
            throw CatalogProblem(.broken, file: path, line: line, "the public key does not belong to the seed (the file was edited?)")
        }
        return key
    }

    /// Reads the key file at `path`. It must not be readable by group or others.
    public static func load(_ path: String) throws(CatalogProblem) -> SigningKey {
        var info = stat()
        guard stat(path, &info) == 0 else { throw CatalogProblem(.broken, file: path, "cannot read the key: \(errnoText())") }
        guard info.st_mode & 0o077 == 0 else {
            throw CatalogProblem(.unsafe, file: path, "the private key is readable or writable by others (mode \(String(info.st_mode & 0o7777, radix: 8))): chmod 600 it")
        }
        switch SystemFiles.bytes(path, limit: maximumSize) {
        case .failure(let error): throw CatalogProblem(.broken, file: path, "cannot read the key: \(error)")
        case .success(let bytes): return try parse(String(decoding: bytes, as: UTF8.self), path: path)
        }
    }

    /// The Ed25519 signature (64 bytes) of `message`.
    public func sign(_ message: [UInt8]) throws(CatalogProblem) -> [UInt8] {
        guard let key = Self.privateKey(seed) else { throw CatalogProblem(.broken, file: "libcrypto", "cannot use the Ed25519 key") }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { throw CatalogProblem(.broken, file: "libcrypto", "out of memory") }
        defer { EVP_MD_CTX_free(context) }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        guard EVP_DigestSignInit(context, nil, nil, nil, key) == 1,
              EVP_DigestSign(context, &signature, &length, message, message.count) == 1, length == 64 else {
            throw CatalogProblem(.broken, file: "libcrypto", "Ed25519 signing failed")
        }
        return signature
    }

    private static func privateKey(_ seed: [UInt8]) -> OpaquePointer? {
        seed.withUnsafeBufferPointer { EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, $0.baseAddress, 32) }
    }
}

/// Lowercase hexadecimal, as every digest and key in these files is written.
enum Hex {
    static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of an even number of lowercase hex digits, or `nil`.
    static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for i in stride(from: 0, to: digits.count, by: 2) {
            guard let high = nibble(digits[i]), let low = nibble(digits[i + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }
}
