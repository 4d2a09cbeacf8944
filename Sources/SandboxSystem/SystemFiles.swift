import Glibc

/// Files, directories and paths through plain system calls, for the policy loader and the
/// supervisor (/proc, cgroupfs).
///
/// Not Foundation: linking swift-corelibs-foundation (CoreFoundation) costs every one-shot
/// `extsandbox exec` about a millisecond of start-up, and none of its generality is needed here.
package enum SystemFiles {
    /// The whole file, or the errno of what failed (`EFBIG` past `limit` bytes).
    package static func bytes(_ path: String, limit: Int = 1 << 20) -> Result<[UInt8], Errno> {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(Errno(errno)) }
        defer { close(fd) }
        return readToEnd(fd, limit: limit)
    }

    /// The whole file as UTF-8 text, or `nil` if it cannot be read (or exceeds `limit` bytes).
    package static func text(_ path: String, limit: Int = 1 << 20) -> String? {
        guard case .success(let bytes) = self.bytes(path, limit: limit) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The names in a directory (without `.` and `..`), or `nil` if it cannot be listed.
    package static func entries(_ path: String) -> [String]? {
        guard let directory = opendir(path) else { return nil }
        return entries(of: directory)
    }

    /// The names in the open directory `directory` (read through a close-on-exec duplicate of
    /// its fd, which stays open), or `nil` if it cannot be listed.
    package static func entries(of directory: FileDescriptor) -> [String]? {
        let copy = fcntl(directory.rawValue, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { return nil }
        guard let stream = fdopendir(copy) else {
            close(copy)
            return nil
        }
        // The duplicate shares the original's position: start from the top whatever read it before.
        rewinddir(stream)
        return entries(of: stream)
    }

    /// The names a directory stream lists, without `.` and `..`; closes the stream.
    private static func entries(of directory: OpaquePointer) -> [String] {
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = name(of: entry)
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// The names in a directory as bytes (without `.` and `..`), or `nil` if it cannot be
    /// listed: a name need not be UTF-8, and ``entries(_:)`` replaces what is not with U+FFFD
    /// (a name that then opens nothing).
    package static func entryBytes(_ path: String) -> [[UInt8]]? {
        guard let directory = opendir(path) else { return nil }
        defer { closedir(directory) }
        var names: [[UInt8]] = []
        while let entry = readdir(directory) {
            let name = nameBytes(of: entry)
            if name != [0x2e] && name != [0x2e, 0x2e] { names.append(name) }
        }
        return names
    }

    /// A directory entry's name (see ``nameBytes(of:)``), non-UTF-8 bytes replaced with U+FFFD.
    package static func name(of entry: UnsafePointer<dirent>) -> String {
        String(decoding: nameBytes(of: entry), as: UTF8.self)
    }

    /// A directory entry's name, read in place: an entry is only as long as its name
    /// (`d_reclen`), so copying the whole `struct dirent` (`entry.pointee`) reads past the last
    /// one in the buffer, which crashed a host listing /proc when that entry ended a mapping.
    package static func nameBytes(of entry: UnsafePointer<dirent>) -> [UInt8] {
        let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        let name = (UnsafeRawPointer(entry) + offset).assumingMemoryBound(to: CChar.self)
        return Array(UnsafeRawBufferPointer(start: name, count: strlen(name)))
    }

    /// The file type bits (`S_IFDIR`, `S_IFREG`, …) of what `path` names, following links;
    /// `nil` when nothing is there.
    package static func kind(of path: String) -> mode_t? {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & S_IFMT : nil
    }

    /// The canonical absolute path, symbolic links resolved; `nil` if it does not exist.
    package static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// What a symbolic link points to.
    package static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The working directory, or `nil` if it is gone.
    package static func currentDirectory() -> String? {
        guard let cwd = getcwd(nil, 0) else { return nil }
        defer { free(cwd) }
        return String(cString: cwd)
    }

    /// The process's environment (the first of duplicate names wins, as `getenv` finds it).
    /// Must not run while another thread changes the environment (setenv is not thread-safe).
    package static func environment() -> [String: String] {
        var out: [String: String] = [:]
        // NULL after clearenv().
        guard let start = environ as UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? else { return out }
        var entry = start
        while let pointer = entry.pointee {
            entry += 1
            // Entries that are not UTF-8 are left out (as Foundation's ProcessInfo does): a
            // String would replace their bytes, and pass on a different value.
            guard let item = String(validatingCString: pointer) else { continue }
            if let equals = item.firstIndex(of: "=") {
                let name = String(item[..<equals])
                if out[name] == nil { out[name] = String(item[item.index(after: equals)...]) }
            }
        }
        return out
    }
}
