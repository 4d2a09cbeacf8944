import Foundation
import Glibc
@testable import SandboxRuntime
import TestSupport
import Testing

/// Every file system a sandbox mounts registers a memory-cgroup-aware shrinker, and the kernel
/// sizes each new memory cgroup by the most of those ever registered at once (docs/performance.md,
/// "Memory per extension"): a sandbox mounts as few as its isolation needs. Its root, `/dev`, `/tmp` and
/// `/dev/shm` are one tmpfs; `/proc` is the other (the IPC namespace's mqueue is the kernel's).
@Suite("File systems per sandbox")
struct FileSystemCountTests {
    /// The mount table of a process, as (mount point, device, file system type, mount options).
    static func mounts(of pid: pid_t) -> [(point: String, device: String, type: String, options: Set<String>)] {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard let dash = fields.firstIndex(of: "-"), fields.count > dash + 1, fields.count > 5 else { return nil }
            return (fields[4], fields[2], fields[dash + 1], Set(fields[5].split(separator: ",").map(String.init)))
        }
    }

    @Test("root, /dev, /tmp and /dev/shm share one tmpfs; with /proc, two file systems of the sandbox's own; /tmp and /dev/shm hold exactly /tmp's size together")
    func twoFileSystems() async throws {
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["sleep", "600"]))
        defer { process.kill() }
        let program = try #require(process.processIdentifiers().dropFirst().first)
        let table = Self.mounts(of: program)
        let mount = { (point: String) in table.last { $0.point == point } }
        let root = try #require(mount("/")?.device)
        #expect(mount("/dev")?.device == root && mount("/tmp")?.device == root && mount("/dev/shm")?.device == root, "\(table)")
        // Its own: every tmpfs and proc mount (binds of the host's files are ext4 and the like,
        // /dev's nodes devtmpfs).
        let own = Set(table.filter { $0.type == "tmpfs" || $0.type == "proc" }.map(\.device))
        #expect(own.count == 2, "file systems mounted for the sandbox: \(own.sorted()) in \(table)")
        // /dev/shm is writable (no exec, no devices, no set-id) below a read-only /dev.
        #expect(mount("/dev")?.options.contains("ro") == true, "\(table)")
        let shm = try #require(mount("/dev/shm")?.options)
        #expect(shm.isSuperset(of: ["rw", "nosuid", "nodev", "noexec"]), "/dev/shm: \(shm.sorted())")

        // The shared tmpfs leaves /tmp (and /dev/shm, out of the same budget) exactly the
        // standard policy's 256 MiB, as a tmpfs of its own did.
        for path in ["/tmp", "/dev/shm"] {
            var st = statvfs()
            #expect(statvfs("/proc/\(program)/root\(path)", &st) == 0)
            #expect(UInt64(st.f_bavail) * UInt64(st.f_frsize) == 256 << 20, "free in \(path)")
        }
    }

    @Test("/tmp and /dev/shm share /tmp's budget: once a program has filled /tmp, /dev/shm has no room left either")
    func oneBudget() async throws {
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["tmp-fill", "600"]))
        defer { process.kill() }
        let program = try #require(process.processIdentifiers().dropFirst().first)
        func free(_ path: String) -> UInt64? {
            var st = statvfs()
            guard statvfs("/proc/\(program)/root\(path)", &st) == 0 else { return nil }
            return UInt64(st.f_bavail) * UInt64(st.f_frsize)
        }
        #expect(await Fixtures.eventually { free("/tmp") == 0 }, "/tmp never filled up: \(free("/tmp") ?? 0) bytes free")
        #expect(free("/dev/shm") == 0)
    }
}
