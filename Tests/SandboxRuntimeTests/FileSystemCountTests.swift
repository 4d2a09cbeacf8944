import Foundation
import Glibc
@testable import SandboxRuntime
import TestSupport
import Testing

/// Every file system a sandbox mounts registers a memory-cgroup-aware shrinker, and the kernel
/// sizes each new memory cgroup by the most of those ever registered at once (README,
/// performance): a sandbox mounts as few as its isolation needs. Its root, `/dev` and `/tmp` are
/// one tmpfs; `/proc` and `/dev/shm` (a size limit of its own) are the others.
@Suite("File systems per sandbox")
struct FileSystemCountTests {
    /// The mount table of a process, as (mount point, device, file system type).
    static func mounts(of pid: pid_t) -> [(point: String, device: String, type: String)] {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard let dash = fields.firstIndex(of: "-"), fields.count > dash + 1, fields.count > 4 else { return nil }
            return (fields[4], fields[2], fields[dash + 1])
        }
    }

    @Test("root, /dev and /tmp share one tmpfs; with /proc and /dev/shm, three file systems of the sandbox's own; /tmp holds exactly its size")
    func threeFileSystems() async throws {
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["sleep", "600"]))
        defer { process.kill() }
        let program = try #require(process.processIdentifiers().dropFirst().first)
        let table = Self.mounts(of: program)
        let device = { (point: String) in table.last { $0.point == point }?.device }
        let root = try #require(device("/"))
        #expect(device("/dev") == root && device("/tmp") == root, "\(table)")
        // Its own: every tmpfs and proc mount (binds of the host's files are ext4 and the like,
        // /dev's nodes devtmpfs).
        let own = Set(table.filter { $0.type == "tmpfs" || $0.type == "proc" }.map(\.device))
        #expect(own.count == 3, "file systems mounted for the sandbox: \(own.sorted()) in \(table)")
        // The shared tmpfs leaves /tmp exactly the standard policy's 256 MiB, as a tmpfs of its own did.
        var st = statvfs()
        #expect(statvfs("/proc/\(program)/root/tmp", &st) == 0)
        let free = UInt64(st.f_bavail) * UInt64(st.f_frsize)
        #expect(free == 256 << 20, "free in /tmp: \(free)")
    }
}
