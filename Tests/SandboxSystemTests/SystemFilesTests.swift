import Glibc
import SandboxSystem
import Testing

@Suite("System files")
struct SystemFilesTests {
    /// A directory entry is only as long as its name: the last one in readdir's buffer may end
    /// where the mapping ends. Here one ends right before a page the process may not read; reading
    /// the whole `struct dirent` (as a copy of `entry.pointee`) crashes on it.
    @Test("a directory entry's name is read within the entry, even when it ends a mapping")
    func nameOfAnEntryAtTheEndOfAMapping() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapping = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        #expect(mapping != MAP_FAILED)
        defer { munmap(mapping, 2 * page) }
        #expect(mprotect(mapping + page, page, PROT_NONE) == 0)
        // A 24-byte record (ino, off, reclen, type, "ab\0"), as getdents64 lays them out.
        let length = 24
        let entry = mapping + page - length
        memset(entry, 0, length)
        entry.storeBytes(of: UInt16(length), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_reclen)!, as: UInt16.self)
        let name = entry + MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        name.storeBytes(of: UInt8(ascii: "a"), as: UInt8.self)
        (name + 1).storeBytes(of: UInt8(ascii: "b"), as: UInt8.self)
        #expect(SystemFiles.name(of: entry.assumingMemoryBound(to: dirent.self)) == "ab")
    }

    @Test("a directory lists its names, without . and ..")
    func entries() throws {
        var template = Array("/tmp/xsb-entries-XXXXXX".utf8CString)
        let directory = try #require(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }.map { String(cString: $0) })
        defer { rmdir(directory) }
        let names = (0..<300).map { String(repeating: "n", count: 1 + $0 % 200) + "-\($0)" }
        for name in names { close(open(directory + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)) }
        defer { for name in names { unlink(directory + "/" + name) } }
        #expect(SystemFiles.entries(directory)?.sorted() == names.sorted())
    }
}
