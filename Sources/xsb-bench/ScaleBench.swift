import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime

/// `scripts/bench --scale`: how a host scales to thousands of running extensions, measured over
/// the public host API alone (``AppExtensionProcess`` and connections) with the SDK's echo
/// extension (`xsb-echo-extension`) at a `hardened` point, as an application would use it.
///
/// The bench grows the number of extensions alive (each launched, connected and answering its
/// first request, its connection kept open) through `steps` (10, 100, 1,000, 10,000), and at
/// each measures:
///
/// - launches/s: a burst of ``burstLaunches`` more launches (``concurrency`` at a time), each to
///   its first reply, on top of the N alive (then ended again);
/// - one more launch: the median of ``singleLaunches`` sequential launches to the first reply;
/// - RTT median and p99: 64-byte requests round-robin over every alive extension (at least
///   2,000, so each of them answers at least once);
/// - host fds, anonymous memory (RssAnon) and threads, against the host before the first launch;
/// - machine KiB per extension: the drop of MemAvailable since before the first launch ÷ N, minus
///   the extension program's own PSS (its sandbox's init, page tables and kernel objects stay in).
///
/// A second phase does the same up to ``bigHostExtensions`` with a host that holds
/// ``bigHostHeapBytes`` of heap and rewrites all of it before every launch
/// (`machine_kib_per_extension_big_host`): a sandbox's cost must not depend on its host's size.
///
/// The machine is shared: MemAvailable is read before every launch, and a step stops (reported)
/// if it would take the machine below ``memoryFloorKiB``. The limits a host of thousands of
/// extensions may raise are raised (``ScaleLimits``) and restored at the end; everything
/// launched is ended and what is left behind (processes, fds, cgroups, zombies) is reported.
struct ScaleBench: Sendable {
    var extensionPath: String
    /// The policy file of the extension point (the shipped `hardened`).
    var policyPath: String
    var steps: [Int] = [10, 100, 1_000, 10_000]
    var bigHostExtensions = 100
    var bigHostHeapBytes = 256 << 20
    var concurrency = 4
    var burstLaunches = 40
    var singleLaunches = 10
    var minimumRoundTrips = 2_000
    /// MemAvailable (KiB) no step may take the machine below.
    var memoryFloorKiB = 4 << 20
    /// A growth step stops after this many seconds (reported).
    var stepTimeLimit: Double = 1_200

    /// One running extension: its handle and an open connection (so that it is neither suspended
    /// nor ended while the bench holds it), and the host pids of its sandbox init and program.
    struct Running: Sendable {
        let process: AppExtensionProcess
        let connection: ExtensionConnection
        let initPID: pid_t
        let initStart: UInt64
        let programPID: pid_t?
    }

    /// What one step measured.
    struct Step {
        var extensions = 0
        var target = 0
        var stopped: String?
        var growSeconds = 0.0
        var burstLaunchesPerSecond = 0.0
        var oneMoreLaunchMs = 0.0
        var rttMedianUs = 0.0
        var rttP99Us = 0.0
        var answered = 0
        var hostFDs = 0
        var hostFDsPerExtension = 0.0
        var hostKiBPerExtension = 0.0
        var hostThreads = 0
        var memoryAvailableDropKiB = 0
        var programPSSKiB = 0.0
        var initPSSKiB = 0.0
        var machineKiBPerExtension = 0.0
        var accountedKiBPerExtension = 0.0
        var tasksPerExtension = 0.0
        var hostMapsPerExtension = 0.0
        var meminfoKiBPerExtension: [String: Double] = [:]

        var json: [String: Any] {
            var result: [String: Any] = [
                "extensions": extensions, "target": target, "grow_seconds": rounded(growSeconds),
                "launches_per_s": rounded(burstLaunchesPerSecond), "one_more_launch_ms": rounded(oneMoreLaunchMs),
                "rtt_median_us": rounded(rttMedianUs), "rtt_p99_us": rounded(rttP99Us), "answered": answered,
                "host_fds": hostFDs, "host_fds_per_extension": rounded(hostFDsPerExtension),
                "host_kib_per_extension": rounded(hostKiBPerExtension), "host_threads": hostThreads,
                "memavailable_drop_kib": memoryAvailableDropKiB, "extension_pss_kib": rounded(programPSSKiB),
                "init_pss_kib": rounded(initPSSKiB), "machine_kib_per_extension": rounded(machineKiBPerExtension),
                "accounted_kib_per_extension": rounded(accountedKiBPerExtension),
                "tasks_per_extension": rounded(tasksPerExtension), "host_maps_per_extension": rounded(hostMapsPerExtension),
                "meminfo_kib_per_extension": meminfoKiBPerExtension.mapValues(rounded),
            ]
            if let stopped { result["stopped"] = stopped }
            return result
        }
    }

    /// Failures by message, and the limits they point at.
    struct Failures {
        var count = 0
        var messages: [String: Int] = [:]

        mutating func record(_ error: any Error, during what: String) {
            count += 1
            messages["\(what): \(error)", default: 0] += 1
        }

        /// The kernel or process limits the messages name (errno texts of the launch steps).
        var limitsHit: [String] {
            var hits: Set<String> = []
            for message in messages.keys {
                if message.contains("Too many open files in system") { hits.insert("fs.file-max (ENFILE): \(message)") }
                else if message.contains("Too many open files") { hits.insert("RLIMIT_NOFILE (EMFILE): \(message)") }
                if message.contains("Resource temporarily unavailable") {
                    hits.insert("kernel.pid_max, kernel.threads-max or RLIMIT_NPROC (EAGAIN): \(message)")
                }
                if message.contains("No space left on device") {
                    hits.insert("user.max_*_namespaces or a cgroup/inotify limit (ENOSPC): \(message)")
                }
                if message.contains("Cannot allocate memory") { hits.insert("memory or vm.max_map_count (ENOMEM): \(message)") }
            }
            return hits.sorted()
        }
    }

    static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

    private var point: AppExtensionPoint { AppExtensionPoint(name: "xsb-bench.scale", securityLevel: policyPath) }

    // MARK: Launching and ending

    /// Launches one extension, connects, and checks its answer to a first request.
    func launch(_ name: String) async throws -> Running {
        let identity = AppExtensionIdentity.developmentOnly(bundleIdentifier: name, executablePath: extensionPath, point: point)
        let process = try await AppExtensionProcess(configuration: .init(
            identity: identity, suspendAfter: .seconds(3_600), terminateAfter: .seconds(7_200)))
        do {
            let connection = try await process.makeConnection()
            let payload = Array(name.utf8)
            let reply = try await connection.send(ExtensionMessage(payload))
            guard reply.payload == payload else { throw BenchError("\(name) answered \(reply.payload.count) bytes, not its echo") }
            let pids = process.sandbox.processIdentifiers()
            let initPID = process.sandbox.pid
            return Running(process: process, connection: connection, initPID: initPID,
                           initStart: ScaleSystem.processState(initPID)?.startTime ?? 0,
                           programPID: pids.count > 1 ? pids[1] : nil)
        } catch {
            process.invalidate()
            throw error
        }
    }

    /// Ends extensions (connection and handle invalidated: GOODBYE, SIGKILL after the grace) and
    /// waits for their sandboxes to end, `width` at a time; returns how many did not end in time.
    @discardableResult
    static func end(_ extensions: [Running], width: Int = 64, timeout: Double = 30) async -> Int {
        var notEnded = 0
        var index = 0
        while index < extensions.count {
            let slice = extensions[index..<min(index + width, extensions.count)]
            index += slice.count
            for running in slice {
                running.connection.invalidate()
                running.process.invalidate()
            }
            notEnded += await withTaskGroup(of: Bool.self) { group in
                for running in slice {
                    group.addTask { await ended(running.process.sandbox, within: timeout) }
                }
                var count = 0
                for await done in group where !done { count += 1 }
                return count
            }
        }
        return notEnded
    }

    /// Whether the sandbox ended within `seconds`.
    static func ended(_ sandbox: SandboxedProcess, within seconds: Double) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { _ = await sandbox.waitForExit(); return true }
            group.addTask { try? await Task.sleep(for: .seconds(seconds)); return false }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    /// Launches `count` extensions, `width` at a time; returns them, the seconds taken and the
    /// failures (each recorded).
    func launchBatch(count: Int, width: Int, prefix: String, failures: inout Failures) async -> (running: [Running], seconds: Double) {
        let start = now()
        var running: [Running] = []
        await withTaskGroup(of: Result<Running, any Error>.self) { group in
            var next = 0, inFlight = 0
            while true {
                while next < count && inFlight < width {
                    let name = "\(prefix).\(next)"
                    next += 1
                    inFlight += 1
                    group.addTask { do { return .success(try await launch(name)) } catch { return .failure(error) } }
                }
                guard inFlight > 0, let result = await group.next() else { break }
                inFlight -= 1
                switch result {
                case .success(let extensionRunning): running.append(extensionRunning)
                case .failure(let error): failures.record(error, during: "launch")
                }
            }
        }
        return (running, now() - start)
    }

    // MARK: Growth

    /// A host that holds a large heap and rewrites all of it between launches: with a sandbox
    /// init that shares the host's pages copy-on-write, every rewrite leaves the old pages to the
    /// inits.
    final class BigHeap {
        let bytes: Int
        let base: UnsafeMutableRawPointer
        private var value: Int32 = 1

        init(bytes: Int) {
            self.bytes = bytes
            base = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 4096)
            rewrite()
        }

        func rewrite() {
            memset(base, value, bytes)
            value = value % 250 + 1
        }

        func release() { base.deallocate() }
    }

    /// Launches until `target` extensions are alive, ``concurrency`` at a time (one at a time with
    /// a big heap, rewritten before each launch). Stops early, saying why, when the machine's
    /// memory would go below the floor, after 10 failures in a row, or past the time limit.
    func grow(_ alive: inout [Running], to target: Int, nextIndex: inout Int, failures: inout Failures,
              heap: BigHeap?, phaseStart: (available: Int, alive: Int), floorKiB: Int? = nil,
              project: Bool = true) async -> (stopped: String?, seconds: Double) {
        let start = now()
        var stopped: String?
        var consecutiveFailures = 0
        let width = heap == nil ? concurrency : 1
        await withTaskGroup(of: Result<Running, any Error>.self) { group in
            var inFlight = 0
            while true {
                while stopped == nil && alive.count + inFlight < target && inFlight < width {
                    if let reason = memoryStop(alive: alive.count + inFlight, target: target, phaseStart: phaseStart,
                                               floorKiB: floorKiB ?? memoryFloorKiB, project: project) {
                        stopped = reason
                        break
                    }
                    heap?.rewrite()
                    let name = "xsb-bench.scale.\(nextIndex)"
                    nextIndex += 1
                    inFlight += 1
                    group.addTask { do { return .success(try await launch(name)) } catch { return .failure(error) } }
                }
                guard inFlight > 0, let result = await group.next() else { break }
                inFlight -= 1
                switch result {
                case .success(let running):
                    alive.append(running)
                    consecutiveFailures = 0
                case .failure(let error):
                    failures.record(error, during: "launch")
                    consecutiveFailures += 1
                    if consecutiveFailures >= 10 && stopped == nil {
                        stopped = "10 launches in a row failed, the last: \(error)"
                    }
                }
                if stopped == nil && now() - start > stepTimeLimit {
                    stopped = String(format: "time limit: %.0f s spent growing", now() - start)
                }
            }
        }
        return (stopped, now() - start)
    }

    /// Why the next launch must not start: MemAvailable near the floor, or the launches still to
    /// come, at the cost per extension seen so far in this phase, would take it below the floor.
    func memoryStop(alive: Int, target: Int, phaseStart: (available: Int, alive: Int), floorKiB: Int, project: Bool) -> String? {
        let available = ScaleSystem.memoryAvailable()
        let margin = 256 << 10
        if available < floorKiB + margin {
            return "memory: stopped at \(alive) alive, MemAvailable \(available / 1024) MiB is within 256 MiB of \(floorKiB / 1024) MiB"
        }
        let launched = alive - phaseStart.alive
        guard project, launched >= 10 else { return nil }
        let perExtension = max(phaseStart.available - available, 0) / launched
        let projected = available - perExtension * (target - alive)
        if projected < memoryFloorKiB {
            return "memory: \(target) alive would take MemAvailable to about \(max(projected, 0) / 1024) MiB "
                + "(\(perExtension) KiB per extension so far, \(available / 1024) MiB available at \(alive)), "
                + "below the \(memoryFloorKiB / 1024) MiB floor"
        }
        return nil
    }

    // MARK: Measuring

    /// Measures the host and the machine with `alive` running, against `base` (before the first
    /// launch) and the MemAvailable of that moment.
    func measure(_ alive: [Running], base: ScaleSystem.HostSample, baseAvailable: Int, baseMeminfo: [String: Int],
                 failures: inout Failures, withLaunches: Bool) async -> Step {
        var step = Step()
        let count = alive.count
        step.extensions = count
        guard count > 0 else { return step }
        // Let the launches' transient allocations settle before reading memory.
        try? await Task.sleep(for: .seconds(1))
        let host = ScaleSystem.HostSample.now()
        let available = ScaleSystem.memoryAvailable(samples: 5)
        step.hostFDs = host.fileDescriptors
        step.hostFDsPerExtension = Double(host.fileDescriptors - base.fileDescriptors) / Double(count)
        step.hostKiBPerExtension = Double(host.anonymousKiB - base.anonymousKiB) / Double(count)
        step.hostThreads = host.threads
        step.hostMapsPerExtension = Double(host.memoryMaps - base.memoryMaps) / Double(count)
        step.memoryAvailableDropKiB = baseAvailable - available
        for (field, before) in baseMeminfo {
            step.meminfoKiBPerExtension[field] = Double((ScaleSystem.meminfo(field) ?? before) - before) / Double(count)
        }

        // The programs' own memory and tasks, from up to 50 extensions spread over all.
        let sampleStride = max(count / 50, 1)
        var programPSS: [Double] = [], initPSS: [Double] = [], tasks: [Double] = []
        for index in stride(from: 0, to: count, by: sampleStride) {
            let running = alive[index]
            guard let program = running.programPID, let pss = ScaleSystem.proportionalSetSize(of: program),
                  let initPss = ScaleSystem.proportionalSetSize(of: running.initPID) else { continue }
            programPSS.append(Double(pss))
            initPSS.append(Double(initPss))
            tasks.append(Double((ScaleSystem.status("Threads", of: "\(program)") ?? 0) + (ScaleSystem.status("Threads", of: "\(running.initPID)") ?? 0)))
        }
        step.programPSSKiB = programPSS.isEmpty ? 0 : programPSS.reduce(0, +) / Double(programPSS.count)
        step.initPSSKiB = initPSS.isEmpty ? 0 : initPSS.reduce(0, +) / Double(initPSS.count)
        step.tasksPerExtension = tasks.isEmpty ? 0 : tasks.reduce(0, +) / Double(tasks.count)
        step.machineKiBPerExtension = Double(step.memoryAvailableDropKiB) / Double(count) - step.programPSSKiB
        // A cross-check little moved by other programs on a shared machine: the init's own memory
        // and the kernel's page tables, stacks and unreclaimable slab the N sandboxes added.
        step.accountedKiBPerExtension = step.initPSSKiB + ["PageTables", "KernelStack", "SUnreclaim"]
            .reduce(0) { $0 + (step.meminfoKiBPerExtension[$1] ?? 0) }

        // Every extension answers; round trips round-robin over all of them.
        let message = ExtensionMessage([UInt8](repeating: UInt8(ascii: "x"), count: 64))
        var samples: [Double] = []
        var answered = Set<Int>()
        for request in 0..<max(count, minimumRoundTrips) {
            let index = request % count
            let start = now()
            do {
                let reply = try await alive[index].connection.send(message)
                samples.append(now() - start)
                if reply.payload == message.payload { answered.insert(index) }
                else { failures.record(BenchError("answered \(reply.payload.count) bytes"), during: "request") }
            } catch {
                failures.record(error, during: "request")
            }
        }
        step.answered = answered.count
        samples.sort()
        if !samples.isEmpty {
            step.rttMedianUs = samples[samples.count / 2] * 1e6
            step.rttP99Us = samples[min(Int((Double(samples.count) * 0.99).rounded(.up)) - 1, samples.count - 1)] * 1e6
        }

        guard withLaunches else { return step }
        // One more launch, sequentially, to its first reply; then a burst.
        var singles: [Double] = []
        var extra: [Running] = []
        for index in 0..<singleLaunches {
            let start = now()
            do {
                extra.append(try await launch("xsb-bench.scale.one-more-\(count)-\(index)"))
                singles.append(now() - start)
            } catch {
                failures.record(error, during: "one more launch")
            }
        }
        await Self.end(extra)
        singles.sort()
        step.oneMoreLaunchMs = singles.isEmpty ? 0 : singles[singles.count / 2] * 1000
        let burst = await launchBatch(count: burstLaunches, width: concurrency, prefix: "xsb-bench.scale.burst-\(count)", failures: &failures)
        step.burstLaunchesPerSecond = Double(burst.running.count) / burst.seconds
        await Self.end(burst.running)
        return step
    }

    // MARK: The run

    struct Outcome {
        var steps: [Step] = []
        var bigHost: Step?
        var failures = Failures()
        var limitsRaised: [String] = []
        var limitsRefused: [String] = []
        var leftBehind: [String: Int] = [:]
        var memoryRecoveredKiBPerExtension = 0.0
    }

    func run() async throws -> Outcome {
        var outcome = Outcome()
        let limits = ScaleLimits()
        defer { limits.restore() }
        // Per process at once; machine-wide ones once a step shows how many tasks an extension has.
        limits.raise(extensions: 0, tasksPerExtension: 0, mapsPerExtension: 0)

        // Warm up (page cache, policy compilation, the runtime's threads), then the baseline.
        await Self.end([try await launch("xsb-bench.scale.warmup")])
        try? await Task.sleep(for: .seconds(1))
        let base = ScaleSystem.HostSample.now()
        let baseThreadNames = ScaleSystem.threadNames()
        let fields = ["PageTables", "SUnreclaim", "KernelStack", "AnonPages", "Shmem", "Slab"]
        var baseMeminfo: [String: Int] = [:]
        for field in fields { baseMeminfo[field] = ScaleSystem.meminfo(field) }
        let baseAvailable = ScaleSystem.memoryAvailable(samples: 5)

        var alive: [Running] = []
        var nextIndex = 0
        var costEstimateKiB = 4 << 10
        for target in steps.sorted() {
            // A step the machine's memory cannot hold at the cost per extension seen so far still
            // grows, as far as the floor plus 2 GiB of headroom for the machine's other users,
            // and says how far it got and what the whole step would have needed.
            let available = ScaleSystem.memoryAvailable(samples: 3)
            let needed = (target - alive.count) * costEstimateKiB
            let fits = available - needed >= memoryFloorKiB
            // What this step needs, at the previous step's cost per extension (+50%).
            let last = outcome.steps.last
            limits.raise(extensions: target, tasksPerExtension: 1.5 * (last?.tasksPerExtension ?? 8),
                         mapsPerExtension: 1.5 * (last?.hostMapsPerExtension ?? 4))
            let grown = await grow(&alive, to: target, nextIndex: &nextIndex, failures: &outcome.failures, heap: nil,
                                   phaseStart: (baseAvailable, 0), floorKiB: fits ? memoryFloorKiB : memoryFloorKiB + (2 << 20),
                                   project: fits)
            var step = await measure(alive, base: base, baseAvailable: baseAvailable, baseMeminfo: baseMeminfo,
                                     failures: &outcome.failures, withLaunches: grown.stopped == nil)
            step.stopped = grown.stopped.map { reason in
                fits ? reason : reason + "; the step would need about \(needed / 1024) MiB at \(costEstimateKiB) KiB per extension, "
                    + "\(available / 1024) MiB were available (floor \(memoryFloorKiB / 1024) MiB)"
            }
            step.growSeconds = grown.seconds
            if step.extensions > 0 { costEstimateKiB = max(Int(step.machineKiBPerExtension + step.programPSSKiB), 256) }
            step.target = target
            outcome.steps.append(step)
            if step.stopped != nil { break }
        }

        // Everything ends; what the machine gets back.
        let atMaximum = ScaleSystem.memoryAvailable(samples: 5)
        let count = alive.count
        let notEnded = await Self.end(alive)
        alive = []
        await settle(base: base)
        if count > 0 {
            outcome.memoryRecoveredKiBPerExtension = Double(ScaleSystem.memoryAvailable(samples: 5) - atMaximum) / Double(count)
        }

        // The big host: a heap rewritten before every launch.
        let heap = BigHeap(bytes: bigHostHeapBytes)
        try? await Task.sleep(for: .milliseconds(500))
        let heapBase = ScaleSystem.HostSample.now()
        let heapAvailable = ScaleSystem.memoryAvailable(samples: 5)
        var heapMeminfo: [String: Int] = [:]
        for field in fields { heapMeminfo[field] = ScaleSystem.meminfo(field) }
        let grown = await grow(&alive, to: bigHostExtensions, nextIndex: &nextIndex, failures: &outcome.failures, heap: heap,
                               phaseStart: (heapAvailable, 0))
        var bigHost = await measure(alive, base: heapBase, baseAvailable: heapAvailable, baseMeminfo: heapMeminfo,
                                    failures: &outcome.failures, withLaunches: false)
        bigHost.stopped = grown.stopped
        bigHost.growSeconds = grown.seconds
        bigHost.target = bigHostExtensions
        outcome.bigHost = bigHost
        let notEndedBig = await Self.end(alive)
        alive = []
        heap.release()

        // Nothing may be left: processes, fds, cgroups, zombies.
        await settle(base: base)
        let after = ScaleSystem.HostSample.now()
        let ownThreads = { (names: [String]) in names.filter { !ScaleFaults.CycleOutcome.isDispatchWorker($0) }.count }
        outcome.leftBehind = [
            "sandboxes_not_ended": notEnded + notEndedBig,
            "fds": after.fileDescriptors - base.fileDescriptors,
            // libdispatch's workers come and go with load (ScaleFaults.dispatchWorkerSlack).
            "threads_not_dispatch_workers": ownThreads(ScaleSystem.threadNames()) - ownThreads(baseThreadNames),
            "dispatch_workers": (after.threads - base.threads) - (ownThreads(ScaleSystem.threadNames()) - ownThreads(baseThreadNames)),
            "cgroups": after.cgroups,
            "zombies": after.zombies,
            "mounts": after.mounts - base.mounts,
        ]
        outcome.limitsRaised = limits.descriptions
        // Asked once per step: the same refusal is reported once.
        outcome.limitsRefused = Array(Set(limits.refused)).sorted()
        return outcome
    }

    /// Waits (up to 20 s) until the sandboxes' cgroups are gone and no zombie is left.
    func settle(base: ScaleSystem.HostSample) async {
        let deadline = now() + 20
        while now() < deadline {
            let sample = ScaleSystem.HostSample.now()
            if sample.cgroups == 0 && sample.zombies == 0 && sample.fileDescriptors <= base.fileDescriptors { break }
            try? await Task.sleep(for: .milliseconds(100))
        }
        try? await Task.sleep(for: .seconds(1))
    }
}
