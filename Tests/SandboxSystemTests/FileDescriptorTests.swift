import Glibc
import SandboxSystem
import Testing

/// The owned descriptor closes exactly once, and never a number it no longer owns.
///
/// Other suites open and close descriptors in this process at the same time, so a number is
/// checked by what it refers to (a file of this test's own), never by whether it is open, and a
/// number is reused on purpose only in a child process.
@Suite("Owned file descriptors")
struct FileDescriptorTests {
    /// An open descriptor of a new, unlinked file of its own, and that file's inode.
    static func openPrivateFile() throws -> (fd: Int32, inode: ino_t) {
        var template = Array("/tmp/xsb-fd-test-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        try #require(fd >= 0)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        unlink(template)
        var info = stat()
        try #require(fstat(fd, &info) == 0)
        return (fd, info.st_ino)
    }

    /// Whether `fd` is open on the file with `inode`.
    static func refers(_ fd: Int32, to inode: ino_t) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_ino == inode
    }

    @Test("a failed open makes no descriptor, and its errno stays for the caller")
    func negativeIsNone() {
        errno = 0
        #expect(FileDescriptor(adopting: open("/nonexistent/x", O_RDONLY)) == nil)
        #expect(errno == ENOENT)
    }

    @Test("the last reference closes it")
    func deinitCloses() throws {
        let (raw, inode) = try Self.openPrivateFile()
        do {
            let fd = FileDescriptor(adopting: raw)
            #expect(fd.map { Self.refers($0.rawValue, to: inode) } == true)
        }
        #expect(!Self.refers(raw, to: inode))
    }

    @Test("close() closes once: the number, once reused, is left alone by a second close and the deinit")
    func closeIsOnce() async {
        // In a process of its own: the number is reused on purpose (dup2), which in this one could
        // replace a descriptor another suite has just opened.
        await #expect(processExitsWith: .success) {
            guard let (raw, inode) = try? FileDescriptorTests.openPrivateFile() else { exit(2) }
            var fd = FileDescriptor(adopting: raw)
            fd?.close()
            guard !FileDescriptorTests.refers(raw, to: inode) else { exit(3) }
            guard let (other, otherInode) = try? FileDescriptorTests.openPrivateFile(), dup2(other, raw) == raw else { exit(4) }
            fd?.close()
            fd = nil
            // A second close or the deinit must not have closed a number it no longer owned.
            exit(FileDescriptorTests.refers(raw, to: otherInode) ? 0 : 1)
        }
    }

    @Test("release() hands the number on without closing it")
    func releaseKeepsItOpen() throws {
        let (raw, inode) = try Self.openPrivateFile()
        var fd = FileDescriptor(adopting: raw)
        #expect(fd?.release() == raw)
        #expect(fd?.release() == nil)
        fd = nil
        #expect(Self.refers(raw, to: inode))
        close(raw)
    }
}
