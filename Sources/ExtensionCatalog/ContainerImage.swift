import Glibc
import SandboxSystem

/// A root caller's containers are ext4 images (docs/containers.md, "The bound"): the file
/// system's own size and inode count are the budget the kernel enforces (ENOSPC), and its
/// root belongs to the sandbox's uid. They live in `.images/<container name>.ext4`, the
/// container's directory being only where the image's file system is placed for a launch.
extension ExtensionContainers {
    static let imageDirectoryName = ".images"

    /// Where mke2fs is looked for (e2fsprogs).
    static let mke2fsPaths = ["/usr/sbin/mke2fs", "/sbin/mke2fs"]

    /// The image of the container `name`: `.images/<name>.ext4` (a shared container's `/` as `+`).
    public func imagePath(of name: String) -> String {
        FilePaths.join(FilePaths.join(directory, Self.imageDirectoryName), name.replacing("/", with: "+") + ".ext4")
    }

    /// Makes the image of the container `name` when there is none: a sparse file of `bytes`
    /// with an ext4 file system of (at least) `inodes` inodes whose root is owned by `uid`:`gid`,
    /// mode 0700. An existing image is kept as it is (its budget is the one it was made with).
    /// Returns its path.
    public func prepareImage(_ name: String, bytes: UInt64, inodes: UInt64, uid: UInt32, gid: UInt32) throws(CatalogProblem) -> String {
        let images = try openCreatingSubdirectory(Self.imageDirectoryName)
        defer { images.close() }
        let file = FilePaths.lastComponent(imagePath(of: name))
        let path = FilePaths.join(images.path, file)
        var info = stat()
        if fstatat(images.fd.rawValue, file, &info, AT_SYMLINK_NOFOLLOW) == 0 {
            guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() else {
                throw CatalogProblem(.unsafe, file: path, "the container's image is not a regular file of yours: `extsandbox reset` removes it")
            }
            return path
        }
        // Made under a temporary name and renamed into place: a host killed meanwhile leaves no
        // half-made image behind that a launch would take for a container.
        let partial = ".partial-\(getpid())-" + file
        guard let fd = FileDescriptor(adopting: openat(images.fd.rawValue, partial, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)) else {
            throw CatalogProblem(.broken, file: path, "cannot create the container's image: \(Self.errnoText())")
        }
        func fail(_ reason: String) -> CatalogProblem {
            _ = unlinkat(images.fd.rawValue, partial, 0)
            return CatalogProblem(.broken, file: path, reason)
        }
        guard ftruncate(fd.rawValue, off_t(bytes)) == 0 else { throw fail("cannot size the container's image: \(Self.errnoText())") }
        fd.close()
        guard let mke2fs = Self.mke2fsPaths.first(where: { access($0, X_OK) == 0 }) else {
            throw fail("cannot make the container's file system: mke2fs (e2fsprogs) is not installed")
        }
        let argv = [mke2fs, "-q", "-F", "-t", "ext4", "-m", "0", "-N", "\(inodes)",
                    "-E", "root_owner=\(uid):\(gid),lazy_itable_init=0,lazy_journal_init=0",
                    FilePaths.join(images.path, partial)]
        let status = Self.run(argv)
        guard status == 0 else { throw fail("cannot make the container's file system: \(mke2fs) exited with status \(status)") }
        guard renameat(images.fd.rawValue, partial, images.fd.rawValue, file) == 0 else {
            throw fail("cannot put the container's image in place: \(Self.errnoText())")
        }
        return path
    }

    /// Runs `argv` with /dev/null on 0, 1 and 2 and an empty environment; its exit status, or -1.
    private static func run(_ argv: [String]) -> Int32 { QuietProcess.run(argv, environment: []) }

    /// What the image of `name` takes on the host (its allocated blocks) and the inodes its file
    /// system uses (as its superblock last recorded them), or `nil` without an image.
    func imageUsage(_ name: String) -> Usage? {
        let fd = open(imagePath(of: name), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        // ext4's superblock at 1024: s_inodes_count (offset 0), s_free_inodes_count (16).
        var superblock = [UInt8](repeating: 0, count: 20)
        var inodes: UInt64 = 0
        if pread(fd, &superblock, 20, 1024) == 20 {
            func word(_ at: Int) -> UInt64 { (0..<4).reduce(0) { $0 | UInt64(superblock[at + $1]) << (8 * $1) } }
            inodes = word(0) >= word(16) ? word(0) - word(16) : 0
        }
        return Usage(bytes: UInt64(max(info.st_blocks, 0)) * 512, inodes: inodes)
    }
}
