import CSandboxShim
import Foundation
import Glibc
import SandboxPolicy
import SandboxSystem
import Synchronization
@testable import SandboxRuntime
import Testing
import TestSupport

@Suite("Lifecycle: exit, suspend, resume, kill, die with the supervisor")
struct LifecycleTests {
    @Test("exit status and termination reasons from the runtime API")
    func exitStatus() async throws {
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["exit", "7"]))
        #expect(await process.waitForExit() == .exited(code: 7))
        #expect(!process.isRunning)

        let violating = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["bpf"]))
        #expect(await violating.waitForExit() == .seccompViolation(syscall: "bpf"))
    }

    /// Runs `body` on the probe forking a child and both sleeping, once it has said so (`tick`),
    /// and kills it after; its output is kept open while the program runs. 600 s, not 60: with
    /// the concurrency pool busy with other suites' blocking runs, a test's task has been seen to
    /// resume only after a minute.
    static func withForkSleep(_ body: (SandboxedProcess) async throws -> Void) async throws {
        let output = OutputPipe()
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["fork-sleep", "600"], stdout: output.writeFD))
        defer {
            process.kill()
            withExtendedLifetime(output) {}
        }
        _ = await output.waitFor("tick")
        try await body(process)
    }

    @Test("suspend stops every process of the sandbox, a forked grandchild too; resume continues them")
    func suspendResume() async throws {
        try await Self.withForkSleep { process in
            let inside = process.processIdentifiers().dropFirst()  // all but the init
            #expect(inside.count >= 2, "the probe and its forked child")

            try await process.suspend()
            #expect(await Fixtures.eventually { inside.allSatisfy { Fixtures.processState($0) == "T" } },
                    "states: \(inside.map { Fixtures.processState($0) ?? "gone" })")

            try await process.resume()
            #expect(await Fixtures.eventually { inside.allSatisfy { Fixtures.processState($0) != "T" } },
                    "states: \(inside.map { Fixtures.processState($0) ?? "gone" })")

            process.kill()
            #expect(await process.waitForExit() == .killed)
            #expect(inside.allSatisfy { Fixtures.processState($0) == nil })
        }
    }

    @Test("suspend succeeds while a vfork parent waits in the kernel for its stopped child; resume lets both finish")
    func suspendWithVforkParentWaiting() async throws {
        let output = OutputPipe()
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["vfork-stopped-child"], stdout: output.writeFD))
        defer { process.kill() }
        _ = await output.waitFor("child stopping")
        let inside = Array(process.processIdentifiers().dropFirst())  // the probe, then its child
        #expect(inside.count == 2, "the probe and its vfork child")
        // The child stopped itself; the parent waits for it uninterruptibly ('D'), and no
        // SIGSTOP can make it 'T': before, the suspend failed after half a second of retries.
        #expect(await Fixtures.eventually { inside.map { Fixtures.processState($0) } == ["D", "T"] },
                "states: \(inside.map { Fixtures.processState($0) ?? "gone" })")

        try await process.suspend()
        #expect(inside.map { Fixtures.processState($0) } == ["D", "T"])

        try await process.resume()
        let rest = await output.waitFor("ended with 0")
        #expect(rest.contains("ended with 0"), "output: \(rest)")
        #expect(await process.waitForExit() == .exited(code: 0))
    }

    @Test("a program that ends leaving a child: the child is killed and gone when waitForExit returns")
    func childLeftBehindIsKilled() async throws {
        try await Self.withForkSleep { process in
            let inside = Array(process.processIdentifiers().dropFirst())  // the program, then its child
            try #require(inside.count >= 2, "the probe and its forked child")
            // Only the program ends: its child is reparented to the init, which must kill it (the
            // init skips its kill only when it has no child left).
            #expect(Glibc.kill(inside[0], SIGKILL) == 0)
            #expect(await process.waitForExit() == .signaled(signal: SIGKILL))
            #expect(inside.allSatisfy { Fixtures.processState($0) == nil }, "states: \(inside.map { Fixtures.processState($0) ?? "gone" })")
        }
    }

    @Test("whoever waits for the end hears of it before the supervisor's own work on it (a pool's refill)")
    func waitersBeforeTheSupervisorsWork() async throws {
        // Still running while both register (a program that ended at once would tell each at once).
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["sleep", "600"]))
        let order = Mutex<[String]>([])
        // Registered first, told last.
        process.afterEnded { _ in order.withLock { $0.append("supervisor") } }
        process.whenEnded { _ in order.withLock { $0.append("waiter") } }
        process.kill()
        #expect(await process.waitForExit() == .killed)
        // The supervisor's handler runs on the thread that saw the end, after waitForExit resumed.
        let deadline = ContinuousClock.now + .seconds(5)
        while order.withLock({ $0.count }) < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        #expect(order.withLock { $0 } == ["waiter", "supervisor"])
        // Once ended, either is told at once.
        process.afterEnded { _ in order.withLock { $0.append("late") } }
        #expect(order.withLock { $0.last } == "late")
    }

    @Test("the init sleeps while its program's exit finishes: it never spins waiting for the SIGCHLD")
    func initSleepsThroughTheProgramsExit() async throws {
        // Freeing 512 MiB makes the program's exit long. Its filter goes early in that exit, so
        // the init hears that first and then waits for the SIGCHLD. A spin there would burn as
        // long as the exit takes, and, on a shared CPU, keep the exit from finishing.
        // The init's main thread's time on a CPU (ns), first and last seen while it lived, read
        // by a thread of its own (started before the launch: a pool's threads may all be busy).
        let initPID = BlockingValue<pid_t>(), onCPU = BlockingValue<(first: UInt64?, last: UInt64?)>()
        let initWatched = Mutex(false)
        Thread.detachNewThread {
            let path = "/proc/\(initPID.wait())/schedstat"
            var first: UInt64?, last: UInt64?
            var buffer = [UInt8](repeating: 0, count: 128)
            // Until the init is gone (a failure to open for any other reason, such as a moment
            // when a parallel test holds every fd of this process, is tried again).
            while true {
                let fd = open(path, O_RDONLY | O_CLOEXEC)
                if fd < 0 {
                    if errno == ENOENT || errno == ESRCH { break }
                    continue
                }
                let count = read(fd, &buffer, buffer.count)
                close(fd)
                guard count > 0, let time = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: " ").first.flatMap({ UInt64($0) }) else { break }
                if first == nil {
                    first = time
                    initWatched.withLock { $0 = true }
                }
                last = time
                usleep(100)  // a sample now and then: this thread must not take a CPU itself
            }
            onCPU.set((first, last))
        }
        // The bomb starts only once the thread watches the init (the end is taken on the
        // monitor thread, however late this task resumes after the launch).
        let gate = OutputPipe()
        var configuration = try Fixtures.probeConfiguration(["memory-bomb", "512", "after-stdin"])
        configuration.standardInput = .fileDescriptor(borrowed(gate.readFD))
        let process = try await Supervisor.shared.launch(configuration)
        initPID.set(process.pid)
        let deadline = ContinuousClock.now + .seconds(30)
        while !initWatched.withLock({ $0 }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        // A byte, not only the end of file: a child another test forks meanwhile may hold the write end too.
        _ = write(gate.writeFD, "g", 1)
        gate.closeWriteEnd()
        #expect(await process.waitForExit() == .exited(code: 0))
        let (first, last) = await offThePool { onCPU.wait() }
        let (start, end) = (try #require(first, "the init's schedstat was never read"), try #require(last))
        // (Less: another process took the pid between the reap and the last read.)
        #expect(end >= start && end - start < 3_000_000, "the init used \(end &- start) ns of CPU while its program ran and ended")
    }

    @Test("every process of the sandbox, the init first, is in the sandbox's own cgroups")
    func cgroupMembership() async throws {
        guard let support = CgroupSupport.detect() else {
            print("skipped: no writable cgroup for this user here, so launches rely on rlimits alone")
            return
        }
        try await Self.withForkSleep { process in
            let everyone = process.processIdentifiers()
            #expect(everyone.count >= 3, "the init, the probe and its forked child")
            // /proc/PID/cgroup from the host: "ID:CONTROLLERS:PATH" per hierarchy.
            let expected: [String]
            switch support.layout {
            case .v2: expected = [""]
            case .v1(let memory, let pids): expected = (memory != nil ? ["memory"] : []) + (pids != nil ? ["pids"] : [])
            }
            for pid in everyone {
                let text = try String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8)
                for controller in expected {
                    let line = text.split(separator: "\n").first { $0.split(separator: ":")[1].split(separator: ",").map(String.init) == (controller.isEmpty ? [] : [controller]) || (controller.isEmpty && $0.hasPrefix("0::")) }
                    #expect(line?.contains("/extsandbox-\(getpid())-") == true, "pid \(pid), \(controller.isEmpty ? "v2" : controller): \(line ?? "no line")")
                }
            }
        }
    }

    @Test("control operations on an ended sandbox fail cleanly")
    func controlAfterExit() async throws {
        let process = try await Supervisor.shared.launch(Fixtures.probeConfiguration(["exit", "0"]))
        _ = await process.waitForExit()
        await #expect(throws: SandboxError.self) { try await process.suspend() }
    }

    @Test("no file descriptors, processes or cgroups left behind", .oneExitTestAtATime)
    func nothingLeftBehind() async {
        // In a process of its own (an exit test), where no other test opens descriptors.
        await #expect(processExitsWith: .success) {
            // Warm up: the supervisor's threads and epoll fd exist after the first launch.
            guard let warmup = try? await Supervisor.shared.launch(Fixtures.probeConfiguration(["exit", "0"])) else { exit(2) }
            _ = await warmup.waitForExit()
            // An ended sandbox's mount namespace is let go of just after its end is reported.
            _ = await Fixtures.eventually { MountNamespaceRelease.shared.pending == 0 }
            let before = Fixtures.openFileDescriptors()
            for arguments in [["exit", "1"], ["crash"], ["ptrace"], ["sleep", "30"]] {
                guard let process = try? await Supervisor.shared.launch(Fixtures.probeConfiguration(arguments)) else { exit(3) }
                if arguments[0] == "sleep" { process.kill() }
                _ = await process.waitForExit()
                // Every process of the sandbox is gone once it has ended.
                if process.processIdentifiers().contains(where: { Fixtures.processState($0) != nil }) { exit(4) }
            }
            _ = await Fixtures.eventually { MountNamespaceRelease.shared.pending == 0 }
            let leaked = Fixtures.openFileDescriptors().symmetricDifference(before)
            if !leaked.isEmpty {
                FileHandle.standardError.write(Data("leaked fds: \(leaked)\n".utf8))
                exit(5)
            }
            let cgroupDirs = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory"].flatMap { root -> [String] in
                guard let e = FileManager.default.enumerator(atPath: root) else { return [] }
                return e.compactMap { $0 as? String }.filter { $0.contains("extsandbox-\(getpid())-") }
            }
            if !cgroupDirs.isEmpty { exit(6) }
            exit(0)
        }
    }

    /// The spawner thread only clones: a sandbox still being built (its init stopped here before
    /// it could report) holds up no other launch. Until 417d602 the spawner waited for each
    /// init's report, and a second launch waited out the first one's setup timeout (10 s).
    @Test("a sandbox still being built holds up no other launch", .oneExitTestAtATime)
    func buildsInParallel() async {
        // In a process of its own (an exit test): every sandbox init here is this test's.
        await #expect(processExitsWith: .success) {
            final class Done: Sendable { let value = Atomic<Bool>(false) }
            guard let warmup = try? await Supervisor.shared.launch(Fixtures.probeConfiguration(["exit", "0"])) else { exit(2) }
            _ = await warmup.waitForExit()
            // The spawner thread's children: the inits it cloned, by their name once they exec.
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            guard let spawner = tasks.first(where: {
                (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8))?.hasPrefix("xsb-spawner") == true
            }) else { exit(3) }
            func initBeingBuilt() -> pid_t? {
                let children = (try? String(contentsOfFile: "/proc/self/task/\(spawner)/children", encoding: .utf8)) ?? ""
                return children.split(separator: " ").compactMap { pid_t($0) }.first { pid in
                    (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.hasPrefix("xsb-init") == true
                        && ["S", "R"].contains(Fixtures.processState(pid))
                }
            }
            // Catching an init before it reports takes a few tries: a build takes milliseconds.
            for _ in 0..<100 {
                let done = Done()
                let first = Task {
                    defer { done.value.store(true, ordering: .relaxed) }
                    return try await Supervisor.shared.launch(Fixtures.probeConfiguration(["exit", "0"]))
                }
                var held: pid_t?
                let looking = ContinuousClock.now
                while held == nil, !done.value.load(ordering: .relaxed), ContinuousClock.now - looking < .seconds(5) {
                    if let pid = initBeingBuilt(), kill(pid, SIGSTOP) == 0 { held = pid }
                }
                guard let held else {
                    if case .success(let process) = await first.result { _ = await process.waitForExit() }
                    continue
                }
                // A second launch while the first is held.
                guard let second = try? await Supervisor.shared.launch(Fixtures.probeConfiguration(["exit", "0"])) else { exit(4) }
                let heldMeanwhile = !done.value.load(ordering: .relaxed)
                kill(held, SIGCONT)
                _ = await second.waitForExit()
                switch await first.result {
                case .success(let process):
                    _ = await process.waitForExit()
                    // Held and the second launched meanwhile: the property holds. Otherwise it had
                    // reported before the stop: try again.
                    if heldMeanwhile { exit(0) }
                case .failure(let error):
                    // The first waited out its setup timeout before the second could launch.
                    FileHandle.standardError.write(Data("the held launch failed: \(error)\n".utf8))
                    exit(heldMeanwhile ? 6 : 5)
                }
            }
            exit(7)  // never caught a build in progress
        }
    }

    @Test("the sandbox's fds are only stdio", arguments: Fixtures.Caller.allCases)
    func onlyStdio(caller: Fixtures.Caller) async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "fds"], as: caller)
        #expect(result.status == 0, "\(result.stdout)")
    }

    @Test("every sandbox process dies when the supervisor is killed with SIGKILL", arguments: Fixtures.Caller.allCases)
    func dieWithSupervisor(caller: Fixtures.Caller) async throws {
        let cli = Process()
        var argv = [Fixtures.cli, "exec", "--policy", Fixtures.policyPath(for: caller), "--", Fixtures.probe, "fork-sleep", "300"]
        if caller == .nobody { argv = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + argv }
        cli.executableURL = URL(fileURLWithPath: argv[0])
        cli.arguments = Array(argv.dropFirst())
        let out = Pipe()
        cli.standardOutput = out
        cli.standardError = FileHandle.nullDevice
        try cli.run()
        // setpriv execs the CLI in place, so the CLI keeps this pid.
        let supervisor = cli.processIdentifier
        var sandboxed: [pid_t] = []
        #expect(await Fixtures.eventually(within: 10) {
            sandboxed = Self.descendants(of: supervisor)
            return sandboxed.count >= 3  // init, probe, its child
        }, "sandbox processes: \(sandboxed)")
        kill(supervisor, SIGKILL)
        await offThePool { cli.waitUntilExit() }
        #expect(await Fixtures.eventually { sandboxed.allSatisfy { Fixtures.processState($0) == nil || Fixtures.processState($0) == "Z" } },
                "survivors: \(sandboxed.filter { Fixtures.processState($0) != nil }.map { "\($0)=\(Fixtures.processState($0)!)" })")
    }

    static func descendants(of root: pid_t) -> [pid_t] {
        var result: [pid_t] = [], queue = [root]
        while let next = queue.first {
            queue.removeFirst()
            for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(next)/task")) ?? [] {
                let text = (try? String(contentsOfFile: "/proc/\(next)/task/\(task)/children", encoding: .utf8)) ?? ""
                let children = text.split(separator: " ").compactMap { pid_t($0) }
                result += children
                queue += children
            }
        }
        return result
    }
}
