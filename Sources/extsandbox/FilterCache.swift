import Foundation
import Glibc
import SandboxPolicy

/// Seccomp filters compiled by earlier runs, so `extsandbox exec` need not build the BPF again
/// (libseccomp plus the compiler's self-check: about 1.5 ms of a short command's ~10 ms).
///
/// An entry is only as trustworthy as the place it sits in, so:
/// - the cache is the user's own (`$XDG_CACHE_HOME/extsandbox` or `~/.cache/extsandbox`): a
///   directory owned by the user with no group or other access; entries are opened without
///   following symlinks and must be owned by the user and writable by no one else;
/// - an entry holds the bytes of every file the policy was composed from (its own, and what it
///   extends or includes) and is used only while each still has exactly those bytes (compared in
///   full, not by hash), and only by the very build of extsandbox that wrote it.
/// Anything else (missing, foreign, stale, unreadable) is ignored and the filter is compiled as
/// usual. `EXTSANDBOX_NO_CACHE=1` never reads or writes the cache.
struct FilterCache {
    let directory: String
    let buildStamp: [UInt8]

    private static let magic = Array("extsandbox-filter-1\n".utf8)

    static func forCurrentUser(environment: [String: String] = ProcessInfo.processInfo.environment) -> FilterCache? {
        if environment["EXTSANDBOX_NO_CACHE"] == "1" { return nil }
        let base: String
        if let xdg = environment["XDG_CACHE_HOME"], xdg.hasPrefix("/") {
            base = xdg
        } else if let home = environment["HOME"], home.hasPrefix("/"), isOwnedDirectory(home, private: false) {
            base = home + "/.cache"
        } else {
            return nil
        }
        let directory = base + "/extsandbox"
        mkdir(base, 0o700)
        mkdir(directory, 0o700)
        guard isOwnedDirectory(directory, private: true), let stamp = buildStamp() else { return nil }
        return FilterCache(directory: directory, buildStamp: Array(stamp.utf8))
    }

    /// The filter compiled from `policy`, if one is cached for exactly its files' current bytes.
    func filter(for policy: Policy) -> CompiledSeccompFilter? {
        guard let header = Self.header(buildStamp: buildStamp, files: policy.composedFrom),
              let data = readOwnedFile(entryPath(policy.composedFrom)),
              data.count > header.count, data.prefix(header.count).elementsEqual(header)
        else { return nil }
        let program = [UInt8](data.dropFirst(header.count))
        guard program.count % 8 == 0 else { return nil }
        return CompiledSeccompFilter(program: program)
    }

    /// Records a filter (best effort: a failure only means no cache next time).
    func store(_ filter: CompiledSeccompFilter, for policy: Policy) {
        guard let header = Self.header(buildStamp: buildStamp, files: policy.composedFrom) else { return }
        let bytes = header + filter.program
        let final = entryPath(policy.composedFrom)
        let temporary = final + ".\(getpid()).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        if written == bytes.count { rename(temporary, final) } else { unlink(temporary) }
    }

    /// magic, build stamp, then per file: path, length, bytes. The program follows.
    private static func header(buildStamp: [UInt8], files: [String]) -> [UInt8]? {
        guard !files.isEmpty else { return nil }
        var header = magic + buildStamp + Array("\n\(files.count)\n".utf8)
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else { return nil }
            header += Array("\(file)\n\(data.count)\n".utf8) + [UInt8](data)
        }
        return header
    }

    private func entryPath(_ files: [String]) -> String {
        // FNV-1a of the paths only names the entry; validity comes from the full comparison.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in files.joined(separator: "\n").utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        return directory + "/" + String(hash, radix: 16) + ".bpf"
    }

    private func readOwnedFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_uid == geteuid(),
              info.st_mode & 0o022 == 0, info.st_size < 4 << 20 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        return count == Int(info.st_size) ? bytes : nil
    }

    private static func isOwnedDirectory(_ path: String, private: Bool) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == geteuid() else { return false }
        return !`private` || info.st_mode & 0o077 == 0
    }

    /// Identifies this build of extsandbox: another build may compile differently.
    private static func buildStamp() -> String? {
        var info = stat()
        guard stat("/proc/self/exe", &info) == 0 else { return nil }
        return "\(info.st_dev):\(info.st_ino):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
    }
}
