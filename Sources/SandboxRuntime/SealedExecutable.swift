import CSupervisorSupport
import Glibc
import SandboxSystem
import Synchronization

/// A private, sealed copy of an executable file, for a launch that must run exactly the file it
/// checked (``SandboxConfiguration/executableCopy``).
///
/// A path names whatever is there when it is opened: a file renamed over the checked one, a
/// directory swapped above it, or the same file rewritten in place between a check and an exec
/// by path runs code nobody checked. A copy in a memfd that nobody can write, grow or shrink,
/// exec'd through its descriptor, is immune to all of them: the bytes that run are the bytes
/// that were copied, and a checker reads those same bytes through ``descriptor``.
public final class SealedExecutable: Sendable {
    /// The copy, open read-only.
    public let descriptor: FileDescriptor
    /// The path it was copied from (for messages; the copy never reads it again).
    public let sourcePath: String

    private init(descriptor: FileDescriptor, sourcePath: String) {
        self.descriptor = descriptor
        self.sourcePath = sourcePath
    }

    /// The source file's identity and times: equal only while it is the same file, unchanged
    /// (every write moves its change time, which nobody can set back).
    private struct SourceStatus: Hashable {
        var device: UInt64, inode: UInt64, size: Int64
        var modified: [Int], changed: [Int]

        init(_ info: stat) {
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = Int64(info.st_size)
            modified = [info.st_mtim.tv_sec, info.st_mtim.tv_nsec]
            changed = [info.st_ctim.tv_sec, info.st_ctim.tv_nsec]
        }
    }

    /// Copies of files as they were, so that launching one extension many times copies it once.
    private static let copies = Mutex<[SourceStatus: SealedExecutable]>([:])
    private static let maximumCopies = 64
    /// The largest program copied: the copy is host memory, and a bundle (others' files) must
    /// not be able to make the host hold a file of any size, sparse ones included.
    public static let maximumSize: Int64 = 256 << 20
    /// What the kept copies may hold together before they are dropped (running sandboxes keep
    /// their own mappings).
    static let maximumKeptBytes: Int64 = 1 << 30

    /// The sealed copy of the file at `path`: made now, or the one made earlier of this very
    /// file unchanged. The file is opened once, without following a symlink at its last
    /// component, and must be a regular file that does not change while it is copied. Fails
    /// with step ``SandboxError/Step/exec``, naming the path.
    public static func copy(of path: String) throws(SandboxError) -> SealedExecutable {
        let source = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK)
        guard source >= 0 else { throw SandboxError(step: .exec, errorNumber: errno, detail: "the executable \(path) (open)") }
        defer { close(source) }
        var before = stat()
        guard fstat(source, &before) == 0 else { throw SandboxError(step: .exec, errorNumber: errno, detail: "the executable \(path) (fstat)") }
        guard (before.st_mode & S_IFMT) == S_IFREG else {
            throw SandboxError(step: .exec, errorNumber: EACCES, detail: "the executable \(path) is not a regular file")
        }
        guard Int64(before.st_size) <= maximumSize else {
            throw SandboxError(step: .exec, errorNumber: EFBIG,
                               detail: "the executable \(path) has \(before.st_size) bytes; a program run from a sealed copy may have at most \(maximumSize >> 20) MiB")
        }
        let status = SourceStatus(before)
        if let made = copies.withLock({ $0[status] }) { return made }
        let copy = xsb_sealed_copy(source, "extsandbox-program")
        guard let descriptor = FileDescriptor(adopting: copy) else {
            throw SandboxError(step: .exec, errorNumber: -copy,
                               detail: "the executable \(path) (" + (copy == -ESTALE ? "it changed while it was copied" : "a sealed copy to run") + ")")
        }
        var after = stat()
        guard fstat(source, &after) == 0, SourceStatus(after) == status else {
            throw SandboxError(step: .exec, errorNumber: ESTALE, detail: "the executable \(path) (it changed while it was copied)")
        }
        let made = SealedExecutable(descriptor: descriptor, sourcePath: path)
        return copies.withLock { copies in
            if let other = copies[status] { return other }  // another launch copied it meanwhile
            let kept = copies.keys.reduce(Int64(0)) { $0 + $1.size }
            if copies.count >= maximumCopies || kept + status.size > maximumKeptBytes { copies.removeAll() }
            copies[status] = made
            return made
        }
    }
}
