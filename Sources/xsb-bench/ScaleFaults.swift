import ExtSandbox
import ExtSandboxWire
import Foundation
import Glibc
import SandboxRuntime
import Synchronization

/// Host-level faults over the public host API (issue 14), shared by `scripts/bench --faults` and
/// the ScaleFaultTests (which run this executable, so that what they count is a quiet process's
/// own: no other test opens fds or threads there).
///
/// - ``cycles(_:)``: launch/use/invalidate cycles of the echo extension; the host's fds,
///   threads, children, zombies, cgroups and mounts must not grow, and its anonymous memory
///   grows by at most ``memoryGrowthBoundKiB``.
/// - ``childHost(extensions:)``: a host that launches extensions, prints every sandboxed pid and
///   waits to be SIGKILLed (every one of those processes must then be gone within a second).
/// - ``hostKill(extensions:)``: runs such a child host, kills it, and times the sandboxes' end.
struct ScaleFaults: Sendable {
    var extensionPath: String
    var policyPath: String
    /// Cycles run at once.
    var workers = 2

    /// How much the host's anonymous memory (RssAnon) may grow over a cycle run, after a warm-up:
    /// allocator caches and the concurrency runtime's pools, not a per-cycle leak (10,000
    /// cycles leaking 1 KiB each would exceed it).
    static let memoryGrowthBoundKiB = 8 << 10

    /// How many more libdispatch worker threads there may be after a run than before: the pool
    /// grows a thread or two under load and keeps them a while. A leak of one thread per cycle, or
    /// of any thread the runtime names, is far beyond it.
    static let dispatchWorkerSlack = 2

    private var point: AppExtensionPoint { AppExtensionPoint(name: "xsb-bench.faults", securityLevel: policyPath) }

    /// One cycle: launch (or reuse none: the previous process of this identity has ended), a
    /// connection, a request and its echo, invalidate, and the sandbox's end.
    func cycle(_ identifier: String) async throws {
        let identity = AppExtensionIdentity.developmentOnly(bundleIdentifier: identifier, executablePath: extensionPath, point: point)
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        let sandbox = process.sandbox
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        let payload = Array("cycle \(identifier)".utf8)
        let reply = try await connection.send(ExtensionMessage(payload))
        connection.invalidate()
        process.invalidate()
        guard reply.payload == payload else { throw BenchError("\(identifier) answered \(reply.payload.count) bytes, not its echo") }
        guard await ScaleBench.ended(sandbox, within: 10) else { throw BenchError("\(identifier): the sandbox did not end within 10 s of invalidate") }
    }

    /// The outcome of a cycle run.
    struct CycleOutcome {
        var cycles = 0
        var failed = 0
        var failures: [String: Int] = [:]
        var seconds = 0.0
        var before = ScaleSystem.HostSample.now()
        var after = ScaleSystem.HostSample.now()
        var children = 0
        /// The run stopped at its time limit before `count` cycles.
        var timeLimited = false
        var threadNamesBefore: [String] = []
        var threadNamesAfter: [String] = []
        /// RssAnon (KiB) after each tenth of the run.
        var anonymousTrend: [Int] = []

        /// libdispatch's worker threads (`com.apple.root.*-qos*`; the Swift concurrency pool among
        /// them) come and go with load; every other thread is one the host or the runtime started.
        static func isDispatchWorker(_ name: String) -> Bool { name.contains("qos") }

        /// The threads that close what extensions sent (``UntrustedDescriptors``): a pool that
        /// starts a thread when descriptors wait and none is idle, bounded by its own maximum.
        static func isDescriptorCloser(_ name: String) -> Bool { name == "xsb-fd-closer" }

        var growth: [String: Int] {
            let own = { (names: [String]) in names.filter { !Self.isDispatchWorker($0) && !Self.isDescriptorCloser($0) }.count }
            let closersAfter = threadNamesAfter.filter(Self.isDescriptorCloser).count
            let closersBefore = threadNamesBefore.filter(Self.isDescriptorCloser).count
            return ["fds": after.fileDescriptors - before.fileDescriptors,
             "threads": (after.threads - closersAfter) - (before.threads - closersBefore),
             "threads_not_dispatch_workers": own(threadNamesAfter) - own(threadNamesBefore),
             "descriptor_closers_beyond_maximum": closersAfter - UntrustedDescriptors.maximumClosingThreads,
             "zombies": after.zombies - before.zombies, "cgroups": after.cgroups - before.cgroups,
             "mounts": after.mounts - before.mounts, "children": children, "anonymous_kib": after.anonymousKiB - before.anonymousKiB]
        }

        /// Whether nothing grew beyond its bound.
        var met: Bool {
            let growth = growth
            return failed == 0 && growth.allSatisfy { key, value in
                switch key {
                case "anonymous_kib": value <= ScaleFaults.memoryGrowthBoundKiB
                case "threads": value <= ScaleFaults.dispatchWorkerSlack
                default: value <= 0
                }
            }
        }

        var json: [String: Any] {
            func sample(_ s: ScaleSystem.HostSample) -> [String: Int] {
                ["fds": s.fileDescriptors, "threads": s.threads, "anonymous_kib": s.anonymousKiB, "mounts": s.mounts,
                 "zombies": s.zombies, "cgroups": s.cgroups, "memory_maps": s.memoryMaps]
            }
            return ["cycles": cycles, "time_limited": timeLimited, "failed": failed, "failures": failures, "seconds": ScaleBench.rounded(seconds),
                    "cycle_ms": ScaleBench.rounded(cycles > 0 ? seconds * 1000 * Double(workers) / Double(cycles) : 0),
                    "workers": workers, "before": sample(before), "thread_names_before": threadNamesBefore,
                    "thread_names_after": threadNamesAfter, "after": sample(after), "growth": growth,
                    "anonymous_kib_trend": anonymousTrend, "memory_growth_bound_kib": ScaleFaults.memoryGrowthBoundKiB,
                    "dispatch_worker_slack": ScaleFaults.dispatchWorkerSlack, "met": met]
        }
        var workers = 0
    }

    /// `count` launch/use/invalidate cycles, ``workers`` at a time (each worker its own identity),
    /// after a warm-up of 40; the host's resources before and after, settled.
    func cycles(_ count: Int, timeLimit: Double? = nil) async -> CycleOutcome {
        var outcome = CycleOutcome()
        outcome.workers = workers
        let failures = FailureLog()
        await runCycles(40, tag: "warmup", failures: failures)
        await settle()
        outcome.before = ScaleSystem.HostSample.now()
        outcome.threadNamesBefore = ScaleSystem.threadNames()
        let start = now()
        var done = 0
        // Slices of a tenth (a hundredth with a time limit, checked after each slice).
        let slice = max(count / (timeLimit == nil ? 10 : 100), workers)
        while done < count {
            if let timeLimit, now() - start > timeLimit {
                outcome.timeLimited = true
                break
            }
            let batch = min(slice, count - done)
            await runCycles(batch, tag: "run", failures: failures)
            done += batch
            if timeLimit == nil || outcome.anonymousTrend.count < done * 10 / count {
                outcome.anonymousTrend.append(ScaleSystem.status("RssAnon") ?? -1)
            }
        }
        outcome.seconds = now() - start
        await settle()
        // Worker threads the runtime started for a burst exit after being idle a while: a thread
        // still there after 10 s is one the cycles left behind.
        let deadline = now() + 10
        while (ScaleSystem.status("Threads") ?? 0) > outcome.before.threads && now() < deadline {
            try? await Task.sleep(for: .milliseconds(100))
        }
        outcome.after = ScaleSystem.HostSample.now()
        outcome.threadNamesAfter = ScaleSystem.threadNames()
        outcome.children = Self.childProcesses().filter { ScaleSystem.processState($0)?.state != "Z" }.count
        outcome.cycles = done
        let (failed, messages) = failures.snapshot(excludingTag: "warmup")
        outcome.failed = failed
        outcome.failures = messages
        return outcome
    }

    private func runCycles(_ count: Int, tag: String, failures: FailureLog) async {
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<workers {
                let share = count / workers + (worker < count % workers ? 1 : 0)
                group.addTask {
                    for _ in 0..<share {
                        do { try await cycle("xsb-bench.cycle.\(worker)") } catch { failures.record("\(error)", tag: tag) }
                    }
                }
            }
        }
    }

    /// Waits (up to 10 s) for the sandboxes' cgroups, children and zombies to be gone.
    private func settle() async {
        let deadline = now() + 10
        while now() < deadline {
            if ScaleSystem.cgroupDirectories().isEmpty && Self.childProcesses().isEmpty { break }
            try? await Task.sleep(for: .milliseconds(50))
        }
        try? await Task.sleep(for: .milliseconds(500))
    }

    /// This process's children (every thread's).
    static func childProcesses() -> [pid_t] {
        var children: [pid_t] = []
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            let text = (try? String(contentsOfFile: "/proc/self/task/\(task)/children", encoding: .utf8)) ?? ""
            children += text.split(separator: " ").compactMap { pid_t($0) }
        }
        return children
    }

    // MARK: The host SIGKILLed

    /// Launches `extensions` (each answering), prints `PIDS` with every process of every sandbox
    /// (init and program), then `READY`, and waits to be killed.
    func childHost(extensions: Int) async throws -> Never {
        let bench = ScaleBench(extensionPath: extensionPath, policyPath: policyPath)
        var failures = ScaleBench.Failures()
        let batch = await bench.launchBatch(count: extensions, width: 4, prefix: "xsb-bench.child-host", failures: &failures)
        guard batch.running.count == extensions else {
            FileHandle.standardError.write(Data("xsb-bench: child host launched \(batch.running.count) of \(extensions): \(failures.messages)\n".utf8))
            exit(1)
        }
        let pids = batch.running.flatMap { $0.process.sandbox.processIdentifiers() }
        // Unbuffered: the parent reads these lines while this process waits to be killed.
        FileHandle.standardOutput.write(Data(("PIDS " + pids.map(String.init).joined(separator: " ") + "\nREADY\n").utf8))
        while true {
            withExtendedLifetime(batch.running) { _ = pause() }
        }
    }

    /// The outcome of killing a host: how long until its sandboxes' processes were gone.
    struct HostKillOutcome {
        var extensions = 0
        var processes = 0
        var goneMs: Double?
        var survivors: [pid_t] = []

        var met: Bool { survivors.isEmpty && (goneMs ?? .infinity) <= 1000 }
        var json: [String: Any] {
            ["extensions": extensions, "processes": processes, "gone_ms": goneMs.map(ScaleBench.rounded) ?? NSNull(),
             "survivors": survivors.map(Int.init), "met": met]
        }
    }

    /// Runs this executable as a child host of `extensions`, SIGKILLs it once they all run, and
    /// watches their processes for up to 5 s.
    func hostKill(extensions: Int) throws -> HostKillOutcome {
        let own = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let child = Process()
        child.executableURL = URL(fileURLWithPath: own)
        child.arguments = ["--child-host", "\(extensions)", "--extension", extensionPath, "--scale-policy", policyPath]
        let out = Pipe()
        child.standardOutput = out
        child.standardInput = FileHandle.nullDevice
        try child.run()
        var text = ""
        while !text.contains("READY\n") {
            let data = out.fileHandleForReading.availableData
            if data.isEmpty { break }
            text += String(decoding: data, as: UTF8.self)
        }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("PIDS ") }) else {
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
            throw BenchError("the child host did not report its sandboxes: \(text)")
        }
        let pids = line.dropFirst(5).split(separator: " ").compactMap { pid_t($0) }
        let starts = Dictionary(uniqueKeysWithValues: pids.map { ($0, ScaleSystem.processState($0)?.startTime) })
        func alive(_ pid: pid_t) -> Bool {
            guard let state = ScaleSystem.processState(pid), state.startTime == starts[pid] ?? nil else { return false }
            return state.state != "Z"
        }
        let start = now()
        kill(child.processIdentifier, SIGKILL)
        var outcome = HostKillOutcome(extensions: extensions, processes: pids.count)
        while now() - start < 5 {
            if !pids.contains(where: alive) { outcome.goneMs = (now() - start) * 1000; break }
            usleep(1000)
        }
        child.waitUntilExit()
        outcome.survivors = pids.filter(alive)
        return outcome
    }
}

/// Failures of concurrent cycles, by message.
final class FailureLog: Sendable {
    private let entries = Mutex<[(message: String, tag: String)]>([])

    func record(_ message: String, tag: String) { entries.withLock { $0.append((message, tag)) } }

    func snapshot(excludingTag excluded: String) -> (count: Int, messages: [String: Int]) {
        entries.withLock { entries in
            let counted = entries.filter { $0.tag != excluded }
            var messages: [String: Int] = [:]
            for entry in counted { messages[entry.message, default: 0] += 1 }
            return (counted.count, messages)
        }
    }
}
