import SandboxSystem
import SandboxPolicy

/// One entry of the CLI's policy cache: the resolved policy, its compiled filter, and what is
/// needed to tell whether they are still what loading the file would give.
///
///     entry = 8 bytes magic "xsbpolc" + format version (3), u64 length of the whole entry,
///             u64 checksum of everything after it (``PolicyBinaryFormat/checksum(_:)``),
///             bytes build stamp, resolution, policy, bytes filter program
///     resolution = list str searchDirectories, list (str path, bytes contents) files,
///                  list (str name, opt str excluding, str file) nameLookups,
///                  list (str path, str canonical) canonicalPaths
///
/// ``decode(_:buildStamp:)`` checks the form (and the build stamp); whether the entry still
/// applies is ``PolicyResolution/isCurrent(searchPath:)``, which the caller must also ask.
public enum PolicyCacheEntry {
    static let magic: [UInt8] = Array("xsbpolc".utf8) + [3]  // 2: limits gained memory-scope; 3: seccomp gained memory-deny-write-execute
    static let headerSize = 24

    /// What an entry holds: what the store keeps in memory too.
    public typealias Contents = CompiledPolicy

    public static func encode(
        policy: Policy, resolution: PolicyResolution, filter: CompiledSeccompFilter, buildStamp: [UInt8]
    ) -> [UInt8] {
        var w = ByteWriter()
        w.raw(magic)
        w.u64(0)  // length, filled in below
        w.u64(0)  // checksum
        w.bytes(buildStamp)
        PolicyBinaryFormat.encode(resolution, into: &w)
        PolicyBinaryFormat.encode(policy, into: &w)
        w.bytes(filter.program)
        var out = w.output
        seal(&out)
        return out
    }

    /// Fills in the length and checksum fields of an entry whose other bytes are final (no-op
    /// for fewer bytes than the header). The fuzz target of the decoder uses it too, so that
    /// mutated entries get past the checksum.
    package static func seal(_ entry: inout [UInt8]) {
        guard entry.count >= headerSize else { return }
        let length = UInt64(entry.count)
        let sum = entry.withUnsafeBytes { PolicyBinaryFormat.checksum(UnsafeRawBufferPointer(rebasing: $0[headerSize...])) }
        for i in 0..<8 {
            entry[8 + i] = UInt8(truncatingIfNeeded: length >> (8 * UInt64(i)))
            entry[16 + i] = UInt8(truncatingIfNeeded: sum >> (8 * UInt64(i)))
        }
    }

    /// The entry's contents, or `nil` when it is not exactly an intact entry of this format
    /// written by the build with `buildStamp`.
    public static func decode(_ bytes: [UInt8], buildStamp: [UInt8]) -> Contents? {
        guard bytes.count > headerSize, bytes[0..<8].elementsEqual(magic) else { return nil }
        var r = ByteReader(bytes)
        r.offset = 8
        guard r.u64() == UInt64(bytes.count) else { return nil }
        let sum = r.u64()
        let computed = bytes.withUnsafeBytes { PolicyBinaryFormat.checksum(UnsafeRawBufferPointer(rebasing: $0[headerSize...])) }
        guard sum == computed else { return nil }
        guard r.bytes() == buildStamp, !r.failed,
              let resolution = PolicyBinaryFormat.decodeResolution(from: &r),
              let policy = PolicyBinaryFormat.decodePolicy(from: &r)
        else { return nil }
        let program = r.bytes()
        guard !r.failed, r.offset == bytes.count, !program.isEmpty, program.count % 8 == 0 else { return nil }
        // Every file the policy was made from must be among those whose bytes are checked.
        for file in policy.composedFrom where !resolution.files.contains(where: { FilePaths.isSame($0.path, file) }) { return nil }
        guard let source = policy.sourcePath, let first = resolution.files.first?.path, FilePaths.isSame(first, source) else { return nil }
        return CompiledPolicy(policy: policy, resolution: resolution, filter: CompiledSeccompFilter(program: program))
    }
}
