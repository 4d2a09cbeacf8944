import Foundation
import Glibc
@testable import SandboxRuntime
import TestSupport
import Testing

@Suite("Cgroups are removed when the sandbox ends")
struct CgroupCleanupTests {
    @Test("a sandbox's cgroup directories are gone when waitForExit returns, however it ended",
          arguments: [["exit", "3"], ["crash"], ["bpf"], ["sleep", "600"]])
    func removedAtEnd(arguments: [String]) async throws {
        guard CgroupSupport.detect() != nil else {
            print("skipped: no writable cgroup for this user here, so no sandbox gets a cgroup")
            return
        }
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(arguments))
        let directories = process.cgroupDirectories
        #expect(!directories.isEmpty, "the standard policy limits memory and processes")
        // Only a sandbox still running is sure to have them: a quick exit may already have removed them.
        // (The sleep is long: a loaded test run can keep this task from running for many seconds.)
        if arguments[0] == "sleep" {
            #expect(directories.allSatisfy { access($0, F_OK) == 0 })
            process.kill()
        }
        _ = await process.waitForExit()
        for directory in directories {
            #expect(access(directory, F_OK) != 0, "\(directory) is left")
        }
    }

    @Test("a program the memory cgroup's OOM killer ends is reported so, its cgroups removed as its init exits")
    func memoryLimitReported() async throws {
        guard CgroupSupport.detect() != nil else {
            print("skipped: no writable cgroup for this user here, so no sandbox gets a cgroup")
            return
        }
        // Files in /tmp (256 MiB) are charged to the memory cgroup but not to RLIMIT_AS.
        var configuration = try Fixtures.probeConfiguration(["tmp-fill"])
        configuration.policy.limits.memoryBytes = 64 << 20
        configuration.policy.limits.memoryScope = .sandbox
        let process = try await Supervisor.shared.launch(configuration)
        let directories = process.cgroupDirectories
        let termination = await process.waitForExit()
        #expect(termination == .memoryLimitExceeded, "\(termination)")
        for directory in directories {
            #expect(access(directory, F_OK) != 0, "\(directory) is left")
        }
    }

    @Test("two supervisors of one process give their sandboxes cgroups of distinct names")
    func twoSupervisors() async throws {
        guard CgroupSupport.detect() != nil else {
            print("skipped: no writable cgroup for this user here, so no sandbox gets a cgroup")
            return
        }
        let first = try await Supervisor().launch(Fixtures.probeConfiguration(["sleep", "600"]))
        defer { first.kill() }
        let second = try await Supervisor().launch(Fixtures.probeConfiguration(["sleep", "600"]))
        defer { second.kill() }
        #expect(Set(first.cgroupDirectories).isDisjoint(with: second.cgroupDirectories))
    }

    @Test("removal retries run off the monitor thread: another sandbox's end is reported meanwhile")
    func retriesDoNotBlockTheMonitor() async throws {
        guard case .v1(_, let pidsParent?) = CgroupSupport.detect()?.layout, getuid() == 0 else {
            print("skipped: needs root and a writable v1 pids hierarchy, to hold a cgroup busy from outside")
            return
        }
        let parentTasks = pidsParent + "/tasks"
        // Long sleeps, killed by the test: a loaded run can keep this task waiting for a minute.
        let other = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["sleep", "600"]))
        defer { other.kill() }
        let busy = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["sleep", "600"]))
        defer { busy.kill() }
        guard let pidsDirectory = busy.cgroupDirectories.first(where: { $0.contains("/pids/") }) else {
            Issue.record("no pids cgroup: \(busy.cgroupDirectories)")
            return
        }
        // A host process of the test's own in the sandbox's pids cgroup keeps it busy (EBUSY).
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/bin/sleep")
        holder.arguments = ["30"]
        try holder.run()
        defer {
            // Out again, and gone; then the directory can go if the retries gave up.
            try? "\(holder.processIdentifier)".write(toFile: parentTasks, atomically: false, encoding: .utf8)
            kill(holder.processIdentifier, SIGKILL)
            holder.waitUntilExit()
            rmdir(pidsDirectory)
        }
        try "\(holder.processIdentifier)".write(toFile: pidsDirectory + "/tasks", atomically: false, encoding: .utf8)

        let busyEnded = Task { _ = await busy.waitForExit(); return Date() }
        busy.kill()
        // Its end is seen (the termination is decided) while its cgroup is still busy.
        #expect(await Fixtures.eventually { !busy.isRunning })
        other.kill()
        _ = await other.waitForExit()
        let otherEnded = Date()
        // Let the holder go, so the retries can finish.
        #expect(access(pidsDirectory, F_OK) == 0, "the busy cgroup is still there while held")
        try "\(holder.processIdentifier)".write(toFile: parentTasks, atomically: false, encoding: .utf8)
        let busyEndedAt = await busyEnded.value
        #expect(otherEnded < busyEndedAt, "the other sandbox's end waited for the busy cgroup's removal")
    }
}
