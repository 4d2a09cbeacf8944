import Glibc

/// Reads the small kernel files the supervisor consults (/proc, cgroupfs) with plain syscalls.
/// Foundation's file APIs cost a one-shot `extsandbox exec` a noticeable part of its
/// start-up on first use, and none of their generality is needed here.
enum SystemFiles {
    /// The whole file as UTF-8 text, or `nil` if it cannot be read (or exceeds `limit` bytes).
    static func text(_ path: String, limit: Int = 1 << 20) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { break }
            bytes += chunk[..<count]
            guard bytes.count <= limit else { return nil }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The names in a directory (without `.` and `..`), or `nil` if it cannot be listed.
    static func entries(_ path: String) -> [String]? {
        guard let directory = opendir(path) else { return nil }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
