import SandboxSystem
import Testing

@Suite("File paths")
struct FilePathsTests {
    @Test("below a directory: strictly, byte by byte, at a component boundary", arguments: [
        ("/usr/lib", "/usr", true), ("/usr/lib/x", "/usr", true), ("/usr", "/usr", false), ("/usrx", "/usr", false),
        ("/us", "/usr", false), ("/usr/", "/usr", true), ("/a", "/", true), ("/", "/", false),
        // A combining mark after the slash is a character of its own with the slash, but the
        // kernel sees "/proc/" followed by bytes: below it.
        ("/proc/\u{301}x", "/proc", true), ("/e\u{301}/x", "/\u{e9}", false),
    ])
    func below(path: String, directory: String, expected: Bool) {
        #expect(FilePaths.isBelow(path, directory) == expected)
    }

    @Test("components are counted without empty ones", arguments: [
        ("/", 0), ("", 0), ("/usr", 1), ("/usr/lib", 2), ("usr//lib/", 2), ("//a///b//c", 3),
        // A combining mark after a slash makes one character with it, but the slash still splits.
        ("/a/\u{301}b", 2),
    ])
    func components(path: String, expected: Int) {
        #expect(FilePaths.componentCount(path) == expected)
    }

    @Test("the last component and the directory are cut at the last slash byte", arguments: [
        ("/etc/x/a.yaml", "a.yaml", "/etc/x"), ("/a", "a", "/"), ("a.yaml", "a.yaml", ""), ("/", "/", "/"),
        ("/etc/x/", "x", "/etc/x"),
        // A combining mark after the slash, a prepended mark before it: still a slash.
        ("/e/\u{301}t.appex", "\u{301}t.appex", "/e"), ("/a\u{600}/b", "b", "/a\u{600}"),
    ])
    func lastComponentAndDirectory(path: String, last: String, directory: String) {
        #expect(FilePaths.lastComponent(path).utf8.elementsEqual(last.utf8))
        #expect(FilePaths.directory(of: path).utf8.elementsEqual(directory.utf8))
    }

    @Test("absolute, a slash, a suffix: by bytes")
    func bytePredicates() {
        #expect(FilePaths.isAbsolute("/\u{301}x") && !FilePaths.isAbsolute("x/"))
        #expect(FilePaths.containsSlash("a\u{600}/b") && !FilePaths.containsSlash("a.yaml"))
        #expect(FilePaths.hasSuffix("x\u{600}.appex", ".appex"))
        #expect(FilePaths.hasSuffix("/\u{212A}.yaml", ".yaml") && !FilePaths.hasSuffix("/a.yam", ".yaml"))
        #expect(FilePaths.droppingSuffix("a\u{600}.yaml", ".yaml").utf8.elementsEqual("a\u{600}".utf8))
        #expect(FilePaths.join("/a/", "b") == "/a/b" && FilePaths.join("", "b") == "b" && FilePaths.join("/a", "b") == "/a/b")
    }

    @Test("components split at slash bytes; the same path is the same bytes")
    func componentsAndSameness() {
        #expect(FilePaths.components("/a/\u{301}b//c/") == ["a", "\u{301}b", "c"])
        #expect(FilePaths.components("/") == [])
        #expect(FilePaths.isSame("/caf\u{e9}", "/caf\u{e9}"))
        // Canonically equivalent as strings, two names to the kernel.
        #expect("/caf\u{e9}" == "/cafe\u{301}")
        #expect(!FilePaths.isSame("/caf\u{e9}", "/cafe\u{301}"))
    }

    /// Before: split at ":" characters, a colon that a combining mark follows was no separator.
    @Test("a search list is cut at colon bytes, empty entries left out", arguments: [
        ("/a:\u{301}b:/c", ["/a", "\u{301}b", "/c"]), ("/usr/bin::/bin:", ["/usr/bin", "/bin"]), ("", []), (":", []),
        ("/x", ["/x"]),
    ])
    func searchList(value: String, entries: [String]) {
        #expect(FilePaths.searchList(value).map { Array($0.utf8) } == entries.map { Array($0.utf8) })
    }

    @Test("a normalized absolute path has no empty, . or .. component and is not /", arguments: [
        ("/usr", true), ("/usr/lib", true), ("/.hidden", true), ("/a/...", true), ("/a/.b", true), ("/a/b.", true),
        ("/", false), ("", false), ("usr", false), ("/usr/", false), ("//usr", false), ("/usr//lib", false),
        ("/.", false), ("/..", false), ("/a/./b", false), ("/a/../b", false), ("/a/..", false),
    ])
    func normalized(path: String, expected: Bool) {
        #expect(FilePaths.isNormalizedAbsolute(path) == expected)
    }
}
