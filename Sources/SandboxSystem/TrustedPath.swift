import Glibc

/// Opens policy files and directories (and the CLI's cache directory) only where no one but root
/// and the caller could have written them.
///
/// A policy decides what a sandbox may do, and a root caller's sandbox is only as narrow as the
/// policy it loads: a policy any local user could write (or swap) widens it. So every component
/// of the path, from `/` down, is opened with `openat(…, openPathOnly | O_NOFOLLOW)` relative to the
/// directory fd already checked, and checked with `fstat` on the fd it opened:
/// - it is owned by root or by the caller (the effective uid);
/// - it is not writable by its group or by others, unless it is a sticky directory (such as
///   `/tmp`): there others may add names but cannot rename or remove ours, and every name the
///   walk takes from it is checked in turn (a name someone else created is theirs, and refused).
///
/// A symbolic link is followed only when it is owned by root or the caller and sits in a
/// directory that passed the checks (so no one else could have placed or swapped it); its target
/// is then walked the same way, from `/` or from the link's directory. `..` goes back to the
/// directory fd it came from (kernel semantics, not text). A file is read through an fd opened
/// from its checked directory and compared (device and inode) with the one that was checked.
///
/// The rule is the same as OpenSSH's for `authorized_keys` and sudo's for `sudoers`; ACLs and
/// group membership are not consulted (group-writable is refused even when the group is root's).
package enum TrustedPath {
    /// Why a path could not be opened.
    package enum Failure: Error, Equatable {
        /// `path` (the component reached, symbolic links resolved) does not exist.
        case missing(path: String)
        /// `path` exists but fails a check; `reason` says which ("is writable by others (mode 1777)").
        case untrusted(path: String, reason: String)
        /// A system call failed on `path` (EACCES, ELOOP, ENOTDIR, …).
        case failed(path: String, what: String, errno: Errno)

        /// One line for an error message.
        package var description: String {
            switch self {
            case .missing(let path):
                return "\(path) does not exist"
            case .untrusted(let path, let reason):
                return "refused: \(path) \(reason); \(TrustedPath.rule)"
            case .failed(let path, let what, let errno):
                return "cannot \(what) \(path): \(errno)"
            }
        }

        /// The same without the policies' rule, for a file other than a policy (which names its own).
        package var withoutRule: String {
            switch self {
            case .untrusted(let path, let reason): return "\(path) \(reason)"
            default: return description
            }
        }
    }

    /// The rule, for error messages.
    package static let rule =
        "a policy, its directory and every directory above it must be owned by root or by you and not writable by group or others"

    /// An open directory that passed the checks (closed by ``close()`` or when it goes).
    package struct Directory: Sendable {
        /// Opened `O_RDONLY | O_DIRECTORY`: for `openat`, `fstatat`, `fdopendir`.
        package var fd: FileDescriptor
        /// The path walked, symbolic links resolved.
        package var path: String
        package var info: stat

        package func close() { fd.close() }
    }

    /// Opens the directory `path`. `createMode`: when the last component is missing (and its
    /// parent passed), create it with this mode first (EEXIST is fine: it is then checked as any).
    package static func openDirectory(_ path: String, createMode: mode_t? = nil) throws(Failure) -> Directory {
        var walked: Walked
        do {
            walked = try walk(path)
        } catch .missing where createMode != nil {
            // Only the last component is created, in a parent that passes the checks itself.
            let parentPath = FilePaths.directory(of: absolute(path))
            let name = FilePaths.lastComponent(absolute(path))
            let parent = try openDirectory(parentPath)
            defer { parent.close() }
            if mkdirat(parent.fd.rawValue, name, createMode!) != 0 && errno != EEXIST {
                throw .failed(path: FilePaths.join(parent.path, name), what: "create the directory", errno: Errno(errno))
            }
            walked = try walk(path)
        }
        guard walked.info.st_mode & S_IFMT == S_IFDIR else {
            throw .failed(path: walked.path, what: "open the directory", errno: Errno(ENOTDIR))
        }
        guard let fd = FileDescriptor(adopting: openat(walked.fd.rawValue, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) else {
            throw .failed(path: walked.path, what: "open the directory", errno: Errno(errno))
        }
        return Directory(fd: fd, path: walked.path, info: walked.info)
    }

    /// Why a file that passed the walk cannot be exec'd as one of ours: not a regular file, not
    /// executable, or set-user-ID or set-group-ID (`nil`: none of these).
    package static func executableProblem(mode: mode_t) -> String? {
        if mode & S_IFMT != S_IFREG { return "is not a regular file" }
        if mode & 0o111 == 0 { return "is not executable (mode \(String(mode & 0o7777, radix: 8)))" }
        if mode & (S_ISUID | S_ISGID) != 0 { return "is set-user-ID or set-group-ID (mode \(String(mode & 0o7777, radix: 8)))" }
        return nil
    }

    /// Opens `path`, which must not be a directory, `O_PATH` (and close-on-exec) after the walk's
    /// checks, for `execveat`: the fd names exactly the file that was checked. Returns it with its
    /// `stat` and the path walked (symbolic links resolved).
    package static func openFile(_ path: String) throws(Failure) -> (fd: FileDescriptor, info: stat, path: String) {
        let walked = try walk(path)
        guard walked.info.st_mode & S_IFMT != S_IFDIR else {
            throw .failed(path: walked.path, what: "use", errno: Errno(EISDIR))
        }
        return (walked.fd, walked.info, walked.path)
    }

    /// What ``readFile(_:limit:)`` found at the path when it is not a regular file.
    package enum FileKind: Equatable { case regular, directory, other }

    /// The bytes of the regular file `path`, or `.failure` with the type found (a directory, a
    /// FIFO, …: not opened for reading, so a FIFO cannot block) or `EFBIG` past `limit` bytes.
    /// A file replaced while it is being opened (a writer renaming a new version over it, as the
    /// approvals and every atomically written file are) is walked and opened again, a few times.
    package static func readFile(_ path: String, limit: Int) throws(Failure) -> Result<[UInt8], FileProblem> {
        var attempt = 1
        while true {
            do {
                return try readFileOnce(path, limit: limit)
            } catch .failed(_, _, let errno) where errno == Errno(EAGAIN) && attempt < maximumReopenAttempts {
                attempt += 1
            }
        }
    }

    /// How often ``readFile(_:limit:)`` tries a file that keeps being replaced under it.
    static let maximumReopenAttempts = 16

    private static func readFileOnce(_ path: String, limit: Int) throws(Failure) -> Result<[UInt8], FileProblem> {
        let walked = try walk(path)
        switch walked.info.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: return .failure(.notRegular(.directory))
        default: return .failure(.notRegular(.other))
        }
        // The checked fd is O_PATH (unreadable): open the same name from the same checked directory,
        // and make sure it is still the same file.
        guard let parent = walked.parent else {
            throw .failed(path: walked.path, what: "open", errno: Errno(EISDIR))
        }
        guard let file = FileDescriptor(adopting: openat(parent.rawValue, walked.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) else {
            throw .failed(path: walked.path, what: "open", errno: Errno(errno))
        }
        let fd = file.rawValue
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_dev == walked.info.st_dev, info.st_ino == walked.info.st_ino else {
            throw .failed(path: walked.path, what: "open (it was replaced while being opened)", errno: Errno(EAGAIN))
        }
        return readToEnd(fd, limit: limit).mapError { $0.code == EFBIG ? .tooLarge : .read($0) }
    }

    /// A file that passed the checks but is not something to read as a policy.
    package enum FileProblem: Error, Equatable {
        case notRegular(FileKind)
        case tooLarge
        case read(Errno)
    }

    /// What is wrong with an object's owner or mode, or `nil` when it passes.
    package static func problem(with info: stat, isLink: Bool = false) -> String? {
        let me = geteuid()
        let kind = isLink ? "is a symbolic link owned by" : "is owned by"
        if info.st_uid != 0 && info.st_uid != me {
            return "\(kind) uid \(info.st_uid), not by root or by you (uid \(me))"
        }
        // A symbolic link's own mode is always 0777 and means nothing.
        if isLink { return nil }
        // A sticky directory (/tmp): others may create names in it but cannot rename or remove
        // ours, and the walk checks the owner of every name it takes from it.
        if info.st_mode & S_IFMT == S_IFDIR && info.st_mode & S_ISVTX != 0 { return nil }
        let mode = "mode " + String(info.st_mode & 0o7777, radix: 8)
        if info.st_mode & S_IWOTH != 0 { return "is writable by others (\(mode))" }
        if info.st_mode & S_IWGRP != 0 { return "is writable by its group (gid \(info.st_gid), \(mode))" }
        return nil
    }

    // MARK: The walk

    /// The object a walk ended at: an `O_PATH` fd, its `stat`, the path walked (links resolved),
    /// and the `O_PATH` fd of its directory with its name there (`nil`/"" for `/`).
    struct Walked {
        var fd: FileDescriptor
        var info: stat
        var path: String
        var parent: FileDescriptor?
        var name: String
    }

    /// `O_PATH` (Linux's open flag for an fd that only names an object: it is not readable and
    /// opening it has no side effect on FIFOs or devices); Glibc's module does not export it.
    static let openPathOnly: Int32 = 0o10000000

    /// Links followed in one walk at most (the kernel's own limit).
    static let maximumLinks = 40

    package static func absolute(_ path: String) -> String {
        FilePaths.isAbsolute(path) ? path : FilePaths.join(SystemFiles.currentDirectory() ?? "/", path)
    }

    static func walk(_ path: String) throws(Failure) -> Walked {
        guard !path.isEmpty else { throw .missing(path: path) }
        // Components still to walk, the next one last.
        var pending = FilePaths.components(absolute(path)).reversed().map(String.init)
        guard let root = FileDescriptor(adopting: open("/", openPathOnly | O_DIRECTORY | O_CLOEXEC)) else {
            throw .failed(path: "/", what: "open", errno: Errno(errno))
        }
        // The directories walked so far, `/` first: `..` goes back one (and closes the one left).
        var directories: [(fd: FileDescriptor, path: String)] = [(root, "/")]
        var rootInfo = stat()
        guard fstat(root.rawValue, &rootInfo) == 0 else { throw .failed(path: "/", what: "stat", errno: Errno(errno)) }
        if let reason = problem(with: rootInfo) { throw .untrusted(path: "/", reason: reason) }
        var file: (fd: FileDescriptor, info: stat, path: String, name: String)?
        var links = 0

        while let component = pending.popLast() {
            if component.isEmpty || component == "." { continue }
            if let found = file {
                // Something follows a file: "file/x" or "file/..".
                throw .failed(path: found.path, what: "walk through", errno: Errno(ENOTDIR))
            }
            if component == ".." {
                if directories.count > 1 { directories.removeLast() }
                continue
            }
            let (parent, parentPath) = directories.last!
            let here = FilePaths.join(parentPath, component)
            guard let fd = FileDescriptor(adopting: openat(parent.rawValue, component, openPathOnly | O_NOFOLLOW | O_CLOEXEC)) else {
                if errno == ENOENT { throw .missing(path: here) }
                throw .failed(path: here, what: "open", errno: Errno(errno))
            }
            var info = stat()
            guard fstat(fd.rawValue, &info) == 0 else { throw .failed(path: here, what: "stat", errno: Errno(errno)) }
            switch info.st_mode & S_IFMT {
            case S_IFLNK:
                if let reason = problem(with: info, isLink: true) { throw .untrusted(path: here, reason: reason) }
                links += 1
                guard links <= Self.maximumLinks else { throw .failed(path: here, what: "follow", errno: Errno(ELOOP)) }
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let count = readlinkat(fd.rawValue, "", &buffer, buffer.count - 1)
                guard count > 0 else { throw .failed(path: here, what: "read the symbolic link", errno: Errno(count < 0 ? errno : ENOENT)) }
                let target = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if FilePaths.isAbsolute(target) { directories.removeLast(directories.count - 1) }
                pending += FilePaths.components(target).reversed().map(String.init)
            case S_IFDIR:
                if let reason = problem(with: info) { throw .untrusted(path: here, reason: reason) }
                directories.append((fd, here))
            default:
                if let reason = problem(with: info) { throw .untrusted(path: here, reason: reason) }
                file = (fd, info, here, component)
            }
        }
        if let file {
            // The parent stays open for the read (readFile reopens the name from it).
            return Walked(fd: file.fd, info: file.info, path: file.path, parent: directories.last!.fd, name: file.name)
        }
        let directory = directories.last!
        var info = stat()
        guard fstat(directory.fd.rawValue, &info) == 0 else {
            throw .failed(path: directory.path, what: "stat", errno: Errno(errno))
        }
        let parent = directories.count > 1 ? directories[directories.count - 2].fd : nil
        return Walked(fd: directory.fd, info: info, path: directory.path, parent: parent,
                      name: directories.count > 1 ? FilePaths.lastComponent(directory.path) : "")
    }
}
