import Glibc
import SandboxPolicy
import SandboxSystem

/// Policies resolved and filters compiled by earlier runs, so that `extsandbox exec` need neither
/// load the policy (YAML, validation, `extends:`/`include:`, merging) nor build its BPF
/// (libseccomp plus the compiler's self-check): the on-disk layer of the CLI's ``PolicyStore``.
///
/// An entry is only as trustworthy as the place it sits in, so:
/// - the cache is the user's own (`$XDG_CACHE_HOME/extsandbox` or `~/.cache/extsandbox`), reached
///   through directory fds without following any symbolic link someone else could have placed or
///   swapped (``TrustedPath``'s walk: every directory above it owned by root or the user and not
///   writable by group or others); `$XDG_CACHE_HOME` (or `~/.cache`) must be owned by the user and
///   not writable by group or others, `extsandbox` in it owned by the user with no group or other
///   access. Anything else means no cache (a miss), never an error;
/// - entries are opened from that directory fd without following symlinks and must be regular
///   files owned by the user and writable by no one else;
/// - an entry (``PolicyCacheEntry``) holds the
///   resolved policy, its filter, and everything outside the policy's text that decided them
///   (`PolicyResolution`): the bytes of every file the policy was composed from (its own, and what
///   it extends or includes), each name lookup of `extends:`/`include:` with its result, the
///   search-path directories, and the canonical path of each file. It is used only while each file
///   still has exactly those bytes (compared in full, not by hash, and read with the loader's
///   ownership checks), each lookup along the current search path still finds the same file, and
///   each path still has the same canonical path;
/// - and only by the very build of extsandbox that wrote it, with the same libseccomp version
///   (the build stamp): another build may parse, validate or compile differently;
/// - it is decoded strictly (versioned magic, exact length, checksum, every tag and length
///   checked), so a torn or garbled entry is a miss, not a different policy.
/// Anything else (missing, foreign, stale, unreadable, damaged) is ignored and the policy is
/// loaded and compiled as usual, then stored again. `EXTSANDBOX_NO_CACHE=1` never reads or writes
/// the cache.
public final class PolicyDiskCache: PolicyDiskLayer {
    /// The cache directory, opened `O_RDONLY | O_DIRECTORY`; entries are opened relative to it.
    let directory: FileDescriptor
    private var directoryFD: Int32 { directory.rawValue }
    let buildStamp: [UInt8]
    /// Larger entries are neither written nor read: an entry holds the bytes of every file the
    /// policy was composed from, each at most `PolicyLoader`'s 4 MiB.
    static let maximumEntrySize = 16 << 20

    private init(directory: FileDescriptor, buildStamp: [UInt8]) {
        self.directory = directory
        self.buildStamp = buildStamp
    }


    /// The current user's cache, or `nil` when there is none to trust (or `EXTSANDBOX_NO_CACHE=1`).
    public static func forCurrentUser(environment: [String: String]) -> PolicyDiskCache? {
        if environment["EXTSANDBOX_NO_CACHE"] == "1" { return nil }
        let base: String
        if let xdg = environment["XDG_CACHE_HOME"], FilePaths.isAbsolute(xdg) {
            base = xdg
        } else if let home = environment["HOME"], FilePaths.isAbsolute(home) {
            base = FilePaths.join(home, ".cache")
        } else {
            return nil
        }
        guard let stamp = buildStamp(), let directory = openCacheDirectory(base: base) else { return nil }
        return PolicyDiskCache(directory: directory, buildStamp: Array(stamp.utf8))
    }

    /// `base/extsandbox`, created where missing, as an fd; `nil` when anything on the way is not
    /// the user's (see the type's documentation).
    static func openCacheDirectory(base: String) -> FileDescriptor? {
        let me = geteuid()
        guard let baseDirectory = try? TrustedPath.openDirectory(base, createMode: 0o700) else { return nil }
        defer { baseDirectory.close() }
        guard baseDirectory.info.st_uid == me, baseDirectory.info.st_mode & 0o022 == 0 else { return nil }
        if mkdirat(baseDirectory.fd.rawValue, "extsandbox", 0o700) != 0 && errno != EEXIST { return nil }
        guard let directory = FileDescriptor(
            adopting: openat(baseDirectory.fd.rawValue, "extsandbox", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
        else { return nil }
        var info = stat()
        guard fstat(directory.rawValue, &info) == 0, info.st_uid == me, info.st_mode & 0o077 == 0 else { return nil }
        return directory
    }

    /// What loading `file` along `searchPath` gives, and its filter, if an entry recorded it and
    /// nothing that decided it has changed since.
    public func lookup(file: String, searchPath: PolicySearchPath) -> CompiledPolicy? {
        guard let bytes = readOwnedFile(entryName(file: file, searchPath: searchPath)),
              let entry = PolicyCacheEntry.decode(bytes, buildStamp: buildStamp),
              entry.policy.sourcePath.map({ FilePaths.isSame($0, file) }) == true,
              entry.resolution.isCurrent(searchPath: searchPath)
        else { return nil }
        return entry
    }

    /// Records a loaded policy and its filter (best effort: a failure only means no cache next
    /// time). The resolution holds the bytes the loader parsed, so a file edited since cannot
    /// make the entry valid for the new bytes.
    public func store(_ compiled: CompiledPolicy, searchPath: PolicySearchPath) {
        guard let file = compiled.policy.sourcePath else { return }
        let bytes = PolicyCacheEntry.encode(
            policy: compiled.policy, resolution: compiled.resolution, filter: compiled.filter, buildStamp: buildStamp)
        // An entry `lookup` would refuse to read is not worth writing (on every run).
        guard bytes.count < Self.maximumEntrySize else { return }
        let final = entryName(file: file, searchPath: searchPath)
        let temporary = final + ".\(getpid()).tmp"
        let fd = openat(directoryFD, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        if written == bytes.count {
            renameat(directoryFD, temporary, directoryFD, final)
        } else {
            unlinkat(directoryFD, temporary, 0)
        }
    }

    /// The entry's file name in the cache directory.
    private func entryName(file: String, searchPath: PolicySearchPath) -> String {
        // FNV-1a of the program, the file and the search path only names the entry; validity comes
        // from the entry. The program's name keeps apart the entries of the CLI's two binaries
        // (`extsandbox` and `extsandbox-commands`, whose build stamps differ), each replaced by
        // its own next build.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in Self.programName.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        hash = (hash ^ 0x0a) &* 0x0000_0100_0000_01b3
        for byte in file.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        for directory in searchPath.directories {
            hash = (hash ^ 0x0a) &* 0x0000_0100_0000_01b3
            for byte in directory.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        }
        return String(hash, radix: 16) + ".policy"
    }

    private func readOwnedFile(_ name: String) -> [UInt8]? {
        let fd = openat(directoryFD, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_uid == geteuid(),
              info.st_mode & 0o022 == 0, info.st_size < Self.maximumEntrySize else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        guard bytes.withUnsafeMutableBytes({ readFully(fd, into: $0) }) == bytes.count else { return nil }
        return bytes
    }

    /// The running executable's file name.
    private static let programName = FilePaths.lastComponent(SystemFiles.linkTarget("/proc/self/exe") ?? "")

    /// Identifies this build of extsandbox and the libseccomp it runs with: another build may
    /// parse, validate or compile differently, and libseccomp decides which syscalls exist.
    private static func buildStamp() -> String? {
        var info = stat()
        guard stat("/proc/self/exe", &info) == 0 else { return nil }
        return "\(info.st_dev):\(info.st_ino):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec) "
            + SeccompLibrary.identity()
    }
}
