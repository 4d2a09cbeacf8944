import CMechanismSupport
import Foundation
import Glibc
import Testing

/// network.c: the init names the host (the policy's hostname, domain name "none") and brings the
/// loopback device up, in a user, UTS and network namespace of a forked child's own.
@Suite("Network and host names")
struct NetworkTests {
    static let up = Int64(IFF_UP | IFF_RUNNING)

    @Test("the hostname and domain name set, the loopback device up", arguments: ["box", "a-b.c", String(repeating: "h", count: 64)])
    func named(hostname: String) throws {
        let out = try outcome { xsbt_name_host(hostname, $0) }
        try #require(out.ranThrough, "\(out.failure)")
        #expect(out.report == "\(hostname) none")
        let numbers = out.numbers
        #expect(numbers[0] & Self.up == 0, "a new namespace's loopback starts down")
        #expect(numbers[1] & Self.up == Self.up, "and is up after")
    }

    @Test("a hostname the kernel refuses fails the step, naming it")
    func refused() throws {
        let hostname = String(repeating: "h", count: 65)
        let out = try outcome { xsbt_name_host(hostname, $0) }
        #expect(out.failed(at: XSB_STEP_HOSTNAME) && out.failed_errno == EINVAL && out.detail == hostname, "\(out.failure)")
    }
}

/// cgroups.c: the init joins its cgroups (v1: "0" to each `tasks` file) and roots a cgroup
/// namespace there.
@Suite("cgroups: joined, and the namespace rooted there")
struct CgroupJoinTests {
    /// The v1 memory hierarchy's line of /proc/self/cgroup ("N:memory:PATH"), by section.
    static func memoryPaths(_ report: String) -> [String] {
        report.components(separatedBy: "==\n").dropFirst().map { section in
            section.split(separator: "\n").first { $0.split(separator: ":").dropFirst().first == "memory" }
                .map { String($0.split(separator: ":", maxSplits: 2)[2]) } ?? "(none)"
        }
    }

    @Test("the init moves itself into its cgroup, whose namespace then shows it as /")
    func joined() throws {
        let cgroups = try String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8)
        let own = Self.memoryPaths("==\n" + cgroups)[0]
        // A cgroup v2 only host has no `tasks` files: the init there is started in its cgroup by clone3.
        try #require(own != "(none)" && FileManager.default.fileExists(atPath: "/sys/fs/cgroup/memory/tasks"), "cgroup v1 memory hierarchy: \(cgroups)")
        let name = "xsbt-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let path = own == "/" ? "/\(name)" : "\(own)/\(name)"
        let directory = "/sys/fs/cgroup/memory" + path
        try #require(mkdir(directory, 0o755) == 0, "mkdir \(directory): errno \(errno)")
        defer { rmdir(directory) }
        let out = try outcome { xsbt_join_cgroups(directory + "/tasks", $0) }
        try #require(out.ranThrough && out.result == 0, "\(out.failure) \(out.result)")
        #expect(Self.memoryPaths(out.report) == [own, path, "/"], "before, after the join, in the namespace")
    }
}
