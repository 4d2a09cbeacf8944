import Glibc
import SandboxSystem

/// Extensions' data directories on the host (docs/containers.md): each extension's private
/// container and each host's shared containers, under one directory
/// (``ExtensionLocations/containerDirectory``) that only the caller can enter.
///
/// Layout, below that directory (owned by the caller, mode 0700, every directory above it owned
/// by root or the caller and not writable by others, as the approvals file's):
///
/// - `<identifier>`: the private container of an external extension (and of a development
///   identity); `<identifier>@<host identifier>` for an extension bundled with its host, so the
///   same identifier in another host's bundle never gets it.
/// - `shared/<name>@<host identifier>`: a host's shared container.
/// - `.locks/<container name>`: held shared by every host process while the extension runs,
///   exclusively by ``reset(_:)``.
/// - `.images/<container name>.ext4`: a root caller's container, an ext4 image whose file
///   system bounds it (``prepareImage(_:bytes:inodes:uid:gid:)``); its directory is then only
///   where the image's file system is placed for a launch.
///
/// Each container is owned by the sandbox's host uid (the caller's own, or 65534 for a root
/// caller), mode 0700. Every name below the checked directory is opened with `O_NOFOLLOW`,
/// relative to its parent's descriptor: a symbolic link the sandbox plants inside a container
/// never redirects a later bind, a size count or a reset.
public struct ExtensionContainers: Sendable, Hashable {
    /// The directory that holds every container.
    public var directory: String

    public init(directory: String) {
        self.directory = directory
    }

    /// The subdirectory of shared containers.
    public static let sharedDirectoryName = "shared"
    static let lockDirectoryName = ".locks"

    /// What a container costs on the host: its allocated bytes and its inodes (directories,
    /// files and links, the container itself included).
    public struct Usage: Sendable, Hashable {
        public var bytes: UInt64
        public var inodes: UInt64
    }

    /// The private container's name for `identifier`; bundled extensions' names carry their
    /// host's identifier. Throws for a name that could leave the directory (`/`, a leading `.`,
    /// control characters).
    public static func name(identifier: String, bundledWith host: String? = nil) throws(CatalogProblem) -> String {
        try checkedName(identifier, what: "extension identifier")
        guard let host else { return identifier }
        try checkedName(host, what: "host identifier")
        return identifier + "@" + host
    }

    /// The shared container's name (below ``sharedDirectoryName``) for `name` of `host`.
    public static func sharedName(_ name: String, host: String) throws(CatalogProblem) -> String {
        try checkedName(name, what: "shared container name")
        try checkedName(host, what: "host identifier")
        return sharedDirectoryName + "/" + name + "@" + host
    }

    private static func checkedName(_ name: String, what: String) throws(CatalogProblem) {
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a)
                || byte == 0x2e || byte == 0x2d || byte == 0x5f
        }
        guard !name.isEmpty, name.utf8.count <= 200, allowed, !name.hasPrefix(".") else {
            throw CatalogProblem(.inconsistent, file: name, "a \(what) for a container must be letters, digits, '.', '-' and '_', not starting with '.'")
        }
    }

    /// Creates the container `name` when missing, owned by `uid`:`gid` mode 0700 (an existing
    /// one is given that mode again: a sandbox may have opened up its own bind's root), and
    /// returns its path for the bind: its parent directories are checked and free of symbolic
    /// links, and the container itself is a real directory, not a link.
    public func prepare(_ name: String, uid: UInt32, gid: UInt32) throws(CatalogProblem) -> String {
        let parent = try openParent(of: name, creating: true)
        defer { parent.close() }
        let last = FilePaths.lastComponent(name)
        if mkdirat(parent.fd.rawValue, last, 0o700) == 0 {
            guard fchownat(parent.fd.rawValue, last, uid, gid, AT_SYMLINK_NOFOLLOW) == 0 else {
                let error = errnoText()
                _ = unlinkat(parent.fd.rawValue, last, AT_REMOVEDIR)
                throw CatalogProblem(.broken, file: FilePaths.join(parent.path, last), "cannot give the container to uid \(uid): \(error)")
            }
        } else if errno != EEXIST {
            throw CatalogProblem(.broken, file: FilePaths.join(parent.path, last), "cannot create the container: \(errnoText())")
        }
        let path = FilePaths.join(parent.path, last)
        guard let container = FileDescriptor(adopting: openat(parent.fd.rawValue, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) else {
            throw CatalogProblem(.unsafe, file: path, errno == ELOOP || errno == ENOTDIR
                ? "the container is not a directory (a symbolic link or a file took its place): `extsandbox reset` removes it"
                : "cannot open the container: \(errnoText())")
        }
        var info = stat()
        guard fstat(container.rawValue, &info) == 0 else {
            throw CatalogProblem(.broken, file: path, "cannot stat the container: \(errnoText())")
        }
        guard info.st_uid == uid else {
            throw CatalogProblem(.unsafe, file: path, "the container is owned by uid \(info.st_uid), not by the sandbox's uid \(uid)")
        }
        if info.st_mode & 0o7777 != 0o700 { _ = fchmod(container.rawValue, 0o700) }
        return path
    }

    /// The path of the container `name` (nothing is checked or created).
    public func path(of name: String) -> String { FilePaths.join(directory, name) }

    /// A shared hold on the container's lock for as long as the returned descriptor is open:
    /// ``reset(_:)`` refuses meanwhile. Fails while a reset holds it.
    public func holdWhileRunning(_ name: String) throws(CatalogProblem) -> FileDescriptor {
        let lock = try openLock(name)
        guard flock(lock.rawValue, LOCK_SH | LOCK_NB) == 0 else {
            throw CatalogProblem(.broken, file: path(of: name), errno == EWOULDBLOCK
                ? "the container is being reset; launch again once `extsandbox reset` has finished"
                : "cannot lock the container: \(errnoText())")
        }
        return lock
    }

    /// Whether a host process runs an extension with this container now.
    public func isInUse(_ name: String) -> Bool {
        guard let lock = try? openLock(name, creating: false) else { return false }
        if flock(lock.rawValue, LOCK_EX | LOCK_NB) == 0 { return false }
        return errno == EWOULDBLOCK
    }

    /// What the container takes on the host, or `nil` when it does not exist (yet). Links are
    /// counted, never followed.
    public func usage(_ name: String) -> Usage? {
        if let image = imageUsage(name) { return image }
        guard let parent = try? openParent(of: name, creating: false) else { return nil }
        defer { parent.close() }
        var usage = Usage(bytes: 0, inodes: 0)
        let ok = Self.walk(parent.fd.rawValue, Array(FilePaths.lastComponent(name).utf8CString)) { info in
            usage.bytes += UInt64(max(info.st_blocks, 0)) * 512
            usage.inodes += 1
        }
        return ok ? usage : nil
    }

    /// Empties the container `name` (it is made afresh, empty, at the extension's next launch).
    /// Refused while a host runs the extension. Whatever the container holds (links, directories
    /// without permissions) is removed without following any link.
    /// Returns `false` when there was nothing to remove.
    @discardableResult
    public func reset(_ name: String) throws(CatalogProblem) -> Bool {
        let parent = try openParent(of: name, creating: false)
        defer { parent.close() }
        let lock = try openLock(name)
        guard Self.lockExclusively(lock) else {
            throw CatalogProblem(.broken, file: path(of: name), errno == EWOULDBLOCK
                ? "refusing to reset: the extension is running (a host process holds its container); end it and try again"
                : "cannot lock the container: \(errnoText())")
        }
        let last = FilePaths.lastComponent(name)
        let removedImage = try removeImage(name)
        var info = stat()
        guard fstatat(parent.fd.rawValue, last, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return removedImage }
            throw CatalogProblem(.broken, file: path(of: name), "cannot stat the container: \(errnoText())")
        }
        // Out of the way first: a launch after this point makes a fresh one.
        let trash = ".reset-\(getpid())-" + last
        guard renameat(parent.fd.rawValue, last, parent.fd.rawValue, trash) == 0 else {
            throw CatalogProblem(.broken, file: path(of: name), "cannot move the container aside: \(errnoText())")
        }
        guard Self.remove(parent.fd.rawValue, Array(trash.utf8CString)) else {
            throw CatalogProblem(.broken, file: FilePaths.join(parent.path, trash), "cannot remove the old container's contents: \(errnoText())")
        }
        return true
    }

    /// Removes the image of `name` (a root caller's container), if any; whether there was one.
    private func removeImage(_ name: String) throws(CatalogProblem) -> Bool {
        let images = FilePaths.join(directory, Self.imageDirectoryName)
        guard let directory = try? TrustedPath.openDirectory(images) else { return false }
        defer { directory.close() }
        let file = FilePaths.lastComponent(imagePath(of: name))
        guard unlinkat(directory.fd.rawValue, file, 0) == 0 else {
            if errno == ENOENT { return false }
            throw CatalogProblem(.broken, file: FilePaths.join(directory.path, file), "cannot remove the container's image: \(errnoText())")
        }
        return true
    }

    // MARK: - Directories

    private func openParent(of name: String, creating: Bool) throws(CatalogProblem) -> TrustedPath.Directory {
        let top: TrustedPath.Directory
        do throws(TrustedPath.Failure) {
            top = creating ? try ApprovalStore.openCreatingDirectory(directory) : try TrustedPath.openDirectory(directory)
        } catch {
            throw CatalogProblem(.unsafe, file: directory, error.description)
        }
        // Only the caller may enter: a root caller's containers belong to uid 65534, which other
        // host processes may run as.
        if top.info.st_mode & 0o077 != 0 {
            guard fchmod(top.fd.rawValue, top.info.st_mode & 0o700) == 0 else {
                top.close()
                throw CatalogProblem(.unsafe, file: top.path, "cannot make the containers' directory private (mode 0700): \(errnoText())")
            }
        }
        guard FilePaths.containsSlash(name) else { return top }
        let sub = FilePaths.directory(of: name)
        defer { top.close() }
        do throws(TrustedPath.Failure) {
            return creating ? try ApprovalStore.openCreatingDirectory(FilePaths.join(top.path, sub))
                : try TrustedPath.openDirectory(FilePaths.join(top.path, sub))
        } catch {
            throw CatalogProblem(.unsafe, file: FilePaths.join(top.path, sub), error.description)
        }
    }

    /// The directory `relative` below ``directory``, checked, created (mode 0700) when missing.
    func openCreatingSubdirectory(_ relative: String) throws(CatalogProblem) -> TrustedPath.Directory {
        let path = FilePaths.join(directory, relative)
        do throws(TrustedPath.Failure) {
            return try ApprovalStore.openCreatingDirectory(path)
        } catch {
            throw CatalogProblem(.unsafe, file: path, error.description)
        }
    }

    /// An exclusive lock without waiting for a holder, but through the moment in which a process
    /// being started elsewhere in a host (a fork not yet at its exec) still holds a copy of a
    /// hold that was just released: a few short tries. `errno` is EWOULDBLOCK when held.
    static func lockExclusively(_ lock: FileDescriptor) -> Bool {
        for attempt in 0..<20 {
            if flock(lock.rawValue, LOCK_EX | LOCK_NB) == 0 { return true }
            guard errno == EWOULDBLOCK, attempt < 19 else { return false }
            usleep(10_000)
        }
        return false
    }

    private func openLock(_ name: String, creating: Bool = true) throws(CatalogProblem) -> FileDescriptor {
        let top = try openCreatingSubdirectory(Self.lockDirectoryName)
        defer { top.close() }
        let lockName = name.replacing("/", with: "+")
        let flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC | (creating ? O_CREAT : 0)
        guard let fd = FileDescriptor(adopting: openat(top.fd.rawValue, lockName, flags, 0o600)) else {
            throw CatalogProblem(.broken, file: FilePaths.join(top.path, lockName), "cannot open the container's lock: \(errnoText())")
        }
        return fd
    }

    /// Visits `name` in `parent` and everything below it, never following a link. `false` when
    /// something could not be read. Names are bytes: the sandbox may make names that are not UTF-8.
    static func walk(_ parent: Int32, _ name: [CChar], _ visit: (stat) -> Void) -> Bool {
        var info = stat()
        guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return false }
        visit(info)
        guard info.st_mode & S_IFMT == S_IFDIR else { return true }
        guard let names = entries(parent, name) else { return false }
        guard let fd = FileDescriptor(adopting: openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) else { return false }
        var ok = true
        for entry in names where !walk(fd.rawValue, entry, visit) { ok = false }
        return ok
    }

    /// Removes `name` in `parent` and everything below it, never following a link; a directory
    /// its owner made unreadable or unwritable is given its owner's permissions back first.
    static func remove(_ parent: Int32, _ name: [CChar]) -> Bool {
        var info = stat()
        guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return errno == ENOENT }
        if info.st_mode & S_IFMT == S_IFDIR {
            if let fd = FileDescriptor(adopting: openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) {
                _ = fchmod(fd.rawValue, 0o700)
            }
            guard let names = entries(parent, name),
                  let fd = FileDescriptor(adopting: openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) else { return false }
            for entry in names where !remove(fd.rawValue, entry) { return false }
            return unlinkat(parent, name, AT_REMOVEDIR) == 0
        }
        return unlinkat(parent, name, 0) == 0 || errno == ENOENT
    }

    private static func entries(_ parent: Int32, _ name: [CChar]) -> [[CChar]]? {
        let fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0, let dir = fdopendir(fd) else {
            if fd >= 0 { Glibc.close(fd) }
            return nil
        }
        defer { closedir(dir) }
        var names: [[CChar]] = []
        while let entry = readdir(dir) {
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                raw.prefix { $0 != 0 }.map { CChar(bitPattern: $0) } + [0]
            }
            if entryName != [0x2e, 0] && entryName != [0x2e, 0x2e, 0] { names.append(entryName) }
        }
        return names
    }

    private func errnoText() -> String { Self.errnoText() }
    static func errnoText() -> String { String(cString: strerror(errno)) }
}
