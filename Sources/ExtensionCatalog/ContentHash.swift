import CCrypto
import Glibc
import SandboxSystem
import Synchronization

/// What identifies a file's content without reading it: if none of these changed, neither did
/// the bytes (any write changes `ctime`, which no one can set back).
public struct FileFingerprint: Sendable, Hashable {
    public var device: UInt64
    public var inode: UInt64
    public var size: Int64
    public var modified: timespec
    public var changed: timespec

    public init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = info.st_mtim
        changed = info.st_ctim
    }

    /// The fingerprint of what `path` names (following symbolic links).
    public static func of(_ path: String) -> FileFingerprint? {
        var info = stat()
        return stat(path, &info) == 0 ? FileFingerprint(info) : nil
    }

    public static func == (a: FileFingerprint, b: FileFingerprint) -> Bool {
        a.device == b.device && a.inode == b.inode && a.size == b.size
            && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
            && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(device)
        hasher.combine(inode)
        hasher.combine(size)
        hasher.combine(changed.tv_sec)
        hasher.combine(changed.tv_nsec)
    }
}

/// A SHA-256 digest, written as `sha256:` and 64 hex digits.
public struct ContentDigest: Sendable, Hashable, CustomStringConvertible {
    public var bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }

    public init?(_ text: some StringProtocol) {
        guard text.hasPrefix("sha256:"), let bytes = Hex.decode(text.dropFirst(7)), bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    public var description: String {
        "sha256:" + Hex.encode(bytes)
    }
}

/// SHA-256 of files, cached by fingerprint (device, inode, size, mtime, ctime): a monitor
/// rescanning a thousand bundles, and every launch, re-hash only what changed.
public final class ContentHasher: Sendable {
    public static let shared = ContentHasher()

    private let cache = Mutex<[FileFingerprint: ContentDigest]>([:])

    public init() {}

    /// The SHA-256 of `bytes` (small texts: a symbolic link's target).
    public static func digest(of bytes: [UInt8]) -> ContentDigest {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let done = bytes.withUnsafeBufferPointer { EVP_Digest($0.baseAddress, $0.count, &digest, &length, EVP_sha256(), nil) }
        precondition(done == 1 && length == 32, "libcrypto: SHA-256 failed")
        return ContentDigest(bytes: Array(digest.prefix(32)))
    }

    /// The digest of the file at `path` and the fingerprint it was taken at. The file is read
    /// through one descriptor, fingerprinted before and after: a file that changed while it was
    /// read is an error, not a digest of a mixture.
    public func digest(ofFileAt path: String) throws(CatalogProblem) -> (ContentDigest, FileFingerprint) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { throw CatalogProblem(.broken, file: path, "cannot open: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        return try digest(ofDescriptor: fd, named: path)
    }

    /// The digest of the whole file open as `fd` (read from offset 0, whatever its position),
    /// and the fingerprint it was taken at; `name` names it in errors.
    public func digest(ofDescriptor fd: Int32, named name: String) throws(CatalogProblem) -> (ContentDigest, FileFingerprint) {
        var before = stat()
        guard fstat(fd, &before) == 0 else { throw CatalogProblem(.broken, file: name, "cannot stat: \(String(cString: strerror(errno)))") }
        let fingerprint = FileFingerprint(before)
        if let hit = cache.withLock({ $0[fingerprint] }) { return (hit, fingerprint) }
        guard let context = EVP_MD_CTX_new() else { throw CatalogProblem(.broken, file: name, "libcrypto: out of memory") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else { throw CatalogProblem(.broken, file: name, "libcrypto: SHA-256 unavailable") }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { bytes in retryingInterrupts { pread(fd, bytes.baseAddress, bytes.count, offset) } }
            guard count >= 0 else { throw CatalogProblem(.broken, file: name, "cannot read: \(String(cString: strerror(errno)))") }
            if count == 0 { break }
            offset += off_t(count)
            _ = buffer.withUnsafeBytes { EVP_DigestUpdate(context, $0.baseAddress, count) }
        }
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard EVP_DigestFinal_ex(context, &digest, &length) == 1, length == 32 else {
            throw CatalogProblem(.broken, file: name, "libcrypto: SHA-256 failed")
        }
        var after = stat()
        guard fstat(fd, &after) == 0, FileFingerprint(after) == fingerprint else {
            throw CatalogProblem(.broken, file: name, "changed while it was being hashed")
        }
        let result = ContentDigest(bytes: Array(digest.prefix(32)))
        cache.withLock { cache in
            if cache.count > 65536 { cache.removeAll() }
            cache[fingerprint] = result
        }
        return (result, fingerprint)
    }
}
