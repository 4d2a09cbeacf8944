import CMechanismSupport
import CSandboxShim
import Testing

/// util.c: the clone child's plain-memory string helpers, and a name for every step a failing
/// launch reports.
@Suite("Plain-memory helpers and step names")
struct StringHelperTests {
    @Test("copies are cut to fit and always terminated", arguments: [
        ("hello", 16, "hello"), ("hello", 6, "hello"), ("hello", 5, "hell"), ("hello", 1, ""), ("", 4, ""),
    ] as [(String, Int, String)])
    func copy(source: String, size: Int, copied: String) {
        var buffer = [CChar](repeating: 0x7f, count: size)
        xsb_copy_string(&buffer, size, source)
        #expect(cText(buffer) == copied)
        #expect(buffer.contains(0))
        #expect(xsb_string_length(source) == source.utf8.count)
    }

    @Test("a joined path that does not fit is refused, never cut", arguments: [
        ("/proc/", "12/task", 16, "/proc/12/task"), ("/proc/", "12/task", 14, "/proc/12/task"), ("/proc/", "12/task", 13, nil), ("", "", 1, ""),
    ] as [(String, String, Int, String?)])
    func join(prefix: String, suffix: String, size: Int, joined: String?) {
        var buffer = [CChar](repeating: 0, count: size)
        let rc = xsb_join_path(&buffer, size, prefix, suffix)
        #expect(rc == (joined == nil ? -1 : 0))
        if let joined { #expect(cText(buffer) == joined) }
    }

    @Test("every step has a name of its own")
    func stepNames() {
        let names = (0..<Int32(XSB_STEP_COUNT.rawValue)).map { String(cString: xsb_step_name($0)) }
        #expect(!names.contains("unknown step"), "\(names)")
        #expect(Set(names).count == names.count, "\(names)")
        #expect(String(cString: xsb_step_name(Int32(XSB_STEP_COUNT.rawValue))) == "unknown step")
        #expect(String(cString: xsb_step_name(-1)) == "unknown step")
        #expect(String(cString: xsb_step_name(Int32(XSB_STEP_BIND_MOUNT.rawValue))) == "bind mount")
    }
}
