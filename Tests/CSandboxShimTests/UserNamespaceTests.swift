import CMechanismSupport
import Glibc
import Testing

/// userns.c: the supervisor writes a new user namespace's one-id maps (setgroups denied first);
/// the init becomes that id and hides from the sandbox.
@Suite("User namespace: the id maps and the init's ids")
struct UserNamespaceTests {
    /// The files of the child's /proc the parent read, and the map call's detail, by name.
    static func sections(_ report: String) -> [String: String] {
        var sections: [String: String] = [:]
        var name = ""
        for line in report.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("== ") { name = String(line.dropFirst(3)); sections[name] = ""; continue }
            // The kernel pads a map's columns: compare the numbers.
            let words = line.split(separator: " ").joined(separator: " ")
            if !words.isEmpty { sections[name, default: ""] += words + "\n" }
        }
        return sections
    }

    struct Mapping: Sendable, CustomTestStringConvertible {
        let uidInside: UInt32, uidOutside: UInt32, gidInside: UInt32, gidOutside: UInt32
        var testDescription: String { "uid \(uidInside)→\(uidOutside), gid \(gidInside)→\(gidOutside)" }
    }

    @Test("one id inside for one id outside; the init becomes it, not dumpable", arguments: [
        Mapping(uidInside: 1000, uidOutside: 65534, gidInside: 1001, gidOutside: 65533),
        Mapping(uidInside: 0, uidOutside: 65534, gidInside: 0, gidOutside: 65534),
        Mapping(uidInside: 65534, uidOutside: 1000, gidInside: 65534, gidOutside: 1000),
    ])
    func mapped(_ mapping: Mapping) throws {
        let out = try outcome { xsbt_map_ids(mapping.uidInside, mapping.uidOutside, mapping.gidInside, mapping.gidOutside, 0, $0) }
        try #require(out.ranThrough, "\(out.failure)")
        let numbers = out.numbers
        #expect(numbers[7] == 0, "xsb_userns_map_ids: \(numbers[7])")
        #expect(Self.sections(out.report) == [
            "uid_map": "\(mapping.uidInside) \(mapping.uidOutside) 1\n",
            "gid_map": "\(mapping.gidInside) \(mapping.gidOutside) 1\n",
            "setgroups": "deny\n",
            "detail": "",
        ])
        #expect(Array(numbers[0..<6]) == [Int64(mapping.uidInside), Int64(mapping.uidInside), Int64(mapping.uidInside),
                                          Int64(mapping.gidInside), Int64(mapping.gidInside), Int64(mapping.gidInside)],
                "real, effective and saved ids")
        #expect(numbers[6] == 0, "not dumpable")
    }

    @Test("maps are written once: a second write fails at setgroups, naming the file")
    func mappedTwice() throws {
        let out = try outcome { xsbt_map_ids(1000, 65534, 1000, 65534, 1, $0) }
        try #require(out.ranThrough, "\(out.failure)")
        let numbers = out.numbers
        #expect(numbers[7] == 0 && numbers[8] == -Int64(EPERM), "\(numbers[7]), \(numbers[8])")
        let detail = Self.sections(out.report)["detail"] ?? ""
        #expect(detail.hasPrefix("/proc/") && detail.hasSuffix("/setgroups\n"), "\(detail)")
        #expect(Array(numbers[0..<2]) == [1000, 1000], "the first maps stand")
    }

    @Test("an id the namespace does not map fails the init's step")
    func unmappedId() throws {
        // The child becomes uid 1000 of a namespace that maps only 0, through a second mapping call
        // that never happens: an unmapped namespace maps nothing.
        let out = try outcome { xsbt_map_ids(1000, UInt32.max, 1000, UInt32.max, 0, $0) }
        #expect(out.numbers[7] == -Int64(EINVAL), "a map of host id 4294967295 is refused: \(out.numbers[7])")
        #expect(out.failed(at: XSB_STEP_USERNS_MAP) && out.failed_errno == EINVAL && out.detail == "setresgid", "\(out.failure)")
    }
}
