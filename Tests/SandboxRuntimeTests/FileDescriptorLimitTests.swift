import CSandboxShim
import Foundation
import Glibc
import SandboxPolicy
@testable import SandboxRuntime
import TestSupport
import Testing

/// RLIMIT_NOFILE: raised at start; a launch past it fails clearly and leaves nothing behind.
/// Each test runs in a child process of its own (an exit test): it changes the process's limit.
@Suite("Open-file limit")
struct FileDescriptorLimitTests {
    @Test("the supervisor raises its soft limit to the hard limit once; sandboxes get the original soft limit", .oneExitTestAtATime)
    func raisedAtStart() async {
        await #expect(processExitsWith: .success) {
            var limit = rlimit()
            getrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &limit)
            guard limit.rlim_max > 256 else { exit(0) }  // nothing to raise into
            limit.rlim_cur = 256
            guard setrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &limit) == 0 else { exit(10) }
            _ = Supervisor.shared
            var now = rlimit()
            getrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &now)
            guard now.rlim_cur == limit.rlim_max, now.rlim_max == limit.rlim_max else { exit(11) }
            // A policy without open-files: the sandbox's soft limit is the one we started with.
            let plan = ResourceLimitPlan(ResourceLimits())
            guard let nofile = plan.rlimits.first(where: { $0.resource == XSB_RLIMIT_NOFILE }),
                  nofile.soft == 256, nofile.hard == UInt64(limit.rlim_max) else { exit(12) }
            exit(0)
        }
    }

    static func children() -> Set<pid_t> {
        var result: Set<pid_t> = []
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            let text = (try? String(contentsOfFile: "/proc/self/task/\(task)/children", encoding: .utf8)) ?? ""
            result.formUnion(text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        }
        return result
    }

    static func cgroupDirectories() -> [String] {
        let parents: [String]
        switch CgroupSupport.detect()?.layout {
        case .v2(let parent): parents = [parent]
        case .v1(let memory, let pids): parents = [memory, pids].compactMap { $0 }
        case nil: parents = []
        }
        return parents.flatMap { root in
            ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).filter { $0.hasPrefix("extsandbox-\(getpid())-") }.map { "\(root)/\($0)" }
        }
    }

    /// Launches under a hard limit about 20 fds above the 100 the process holds until a launch fails; prints the error, then
    /// checks that the failed launch left no process, cgroup or fd. Exit codes name the check.
    static func launchUntilExhausted() async -> Int32 {
        let configuration: SandboxConfiguration
        do {
            configuration = try Fixtures.probeConfiguration(["sleep", "60"])
            let warmUp = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["exit", "0"]))
            _ = await warmUp.waitForExit()
            // Its mount namespace is let go of just after its end: not part of the base.
            _ = await Fixtures.eventually { MountNamespaceRelease.shared.pending == 0 }
        } catch {
            print("warm-up: \(error)")
            return 11
        }
        // A host that holds 100 fds already (the sandbox init needs numbers up to 64 plus its
        // extra fds: below that every launch fails), with room for about 20 sandboxes. Every
        // number below the highest open one is filled: this process may have inherited a few
        // scattered high ones from the test runner, whose holes would otherwise hold sandboxes.
        let highest = Fixtures.openFileDescriptors().max() ?? 0
        var filler = open("/dev/null", O_RDONLY | O_CLOEXEC)
        while filler >= 0 && filler < max(100, highest) { filler = open("/dev/null", O_RDONLY | O_CLOEXEC) }
        let ceiling = UInt(max(filler, highest)) + 24
        var limit = rlimit(rlim_cur: ceiling, rlim_max: ceiling)
        guard setrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &limit) == 0 else { return 10 }
        let base = Fixtures.openFileDescriptors()
        // Two fds kept in reserve, so that the checks can still list directories at the limit.
        let reserve = [open("/dev/null", O_RDONLY | O_CLOEXEC), open("/dev/null", O_RDONLY | O_CLOEXEC)]
        var running: [SandboxedProcess] = []
        var failures: [SandboxError] = []
        // Past the first failure, twice more: each fails the same way and leaves nothing.
        while failures.count < 3 && running.count < 100 {
            do {
                running.append(try await Supervisor.shared.launch(configuration))
            } catch {
                failures.append(error)
            }
        }
        // At the limit, with no fd free for a pidfd: a kill still ends its sandbox (its init
        // kills the program), long before the program's own 60 s.
        guard let first = running.first else { return 13 }
        var fillers: [Int32] = []
        while case let fd = open("/dev/null", O_RDONLY | O_CLOEXEC), fd >= 0 { fillers.append(fd) }
        let killedAt = ContinuousClock.now
        first.kill()
        for fd in fillers { close(fd) }
        guard await first.waitForExit() == .killed, ContinuousClock.now - killedAt < .seconds(20) else { return 20 }
        running.removeFirst()
        for fd in reserve { close(fd) }
        print("\(running.count + 1) sandboxes under a limit of \(ceiling); then: \(failures.first.map { "\($0)" } ?? "no failure")")
        guard failures.count == 3 else { return 13 }
        for failure in failures {
            guard failure.errorNumber == EMFILE, "\(failure)".contains("RLIMIT_NOFILE) is \(ceiling)") else { print("\(failure)"); return 14 }
        }
        _ = await Fixtures.eventually { MountNamespaceRelease.shared.pending == 0 }
        let open = Fixtures.openFileDescriptors()
        guard open.count == base.count + running.count else {
            print("fds: \(open.count), expected \(base.count) + \(running.count)")
            return 15
        }
        guard children() == Set(running.map(\.pid)) else { print("children \(children()) vs \(running.map(\.pid))"); return 16 }
        let expectedDirectories = Set(running.flatMap(\.cgroupDirectories))
        guard Set(cgroupDirectories()) == expectedDirectories else { print("cgroups \(cgroupDirectories())"); return 17 }
        for process in running { process.kill() }
        for process in running { _ = await process.waitForExit() }
        // A sandbox that ended by itself passed its mount namespace, let go of just after its end.
        _ = await Fixtures.eventually { MountNamespaceRelease.shared.pending == 0 }
        guard Fixtures.openFileDescriptors() == base else { return 18 }
        guard children().isEmpty, cgroupDirectories().isEmpty else { print("after: children \(children().map { "\($0) \(Fixtures.processState($0) ?? "gone") \((try? String(contentsOfFile: "/proc/\($0)/cmdline", encoding: .utf8)) ?? "")" }) cgroups \(cgroupDirectories())"); return 19 }
        return 0
    }

    @Test("a launch past the limit fails with a clear error and leaves no process, cgroup or fd; a kill at the limit still ends its sandbox", .oneExitTestAtATime)
    func exhaustion() async {
        // The child reports its check's number last (exit codes would hide its output).
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            print("check=\(await FileDescriptorLimitTests.launchUntilExhausted())")
            exit(0)
        }
        let output = String(decoding: result?.standardOutputContent ?? [], as: UTF8.self)
        print(output, terminator: "")
        #expect(output.hasSuffix("check=0\n"), "\(output)")
    }
}
