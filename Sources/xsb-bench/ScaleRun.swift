import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime

/// The whole run: every growth step, the big host, and what is left behind.
extension ScaleBench {
    struct Outcome {
        var steps: [Step] = []
        var bigHost: Step?
        var failures = Failures()
        var limitsRaised: [String] = []
        var limitsRefused: [String] = []
        var leftBehind: [String: Int] = [:]
        var memoryRecoveredKiBPerExtension = 0.0
        /// Seconds MemAvailable took to hold still after the growth steps' teardown.
        var memorySettleSeconds = 0.0
        /// What one empty memory cgroup costs the kernel on this boot (``ScaleSystem/emptyMemoryCgroupKiB(probes:)``).
        var emptyMemoryCgroupKiB: Double?
        /// bubblewrap's sandboxes measured the same way, as many as the step they are compared with.
        var bwrapReference: BwrapMemoryReference?
        /// What one idle pre-built sandbox holds (`--scale-pool`), in KiB.
        var poolKiBPerSandbox: Double?
    }

    /// Waits (up to `limit` seconds) until MemAvailable moves less than 16 MiB a second three
    /// seconds in a row; returns the seconds waited.
    static func waitForSteadyMemory(limit: Double = 120) async -> Double {
        let start = now()
        var last = ScaleSystem.memoryAvailable(samples: 3)
        var steady = 0
        while steady < 3 && now() - start < limit {
            try? await Task.sleep(for: .seconds(1))
            let current = ScaleSystem.memoryAvailable(samples: 3)
            steady = abs(current - last) < 16 << 10 ? steady + 1 : 0
            last = current
        }
        return now() - start
    }

    func run() async throws -> Outcome {
        var outcome = Outcome()
        // Every shard host's end: its report and exit status (what it left is checked below).
        var shardsEnded: [ShardHost.Ended] = []
        let limits = ScaleLimits()
        defer { limits.restore() }
        // Per process at once; machine-wide ones once a step shows how many tasks an extension has.
        limits.raise(extensions: 0, tasksPerExtension: 0, mapsPerExtension: 0)

        // Before anything else allocates: every sandbox has a memory cgroup, whose fixed cost
        // depends on this boot's history more than on us.
        outcome.emptyMemoryCgroupKiB = ScaleSystem.emptyMemoryCgroupKiB()
        // Warm up (page cache, policy compilation, the runtime's threads), then the baseline.
        await Self.end([try await launch("xsb-bench.scale.warmup")])
        outcome.poolKiBPerSandbox = try await preparePool()
        try? await Task.sleep(for: .seconds(1))
        let base = ScaleSystem.HostSample.now()
        let baseThreadNames = ScaleSystem.threadNames()
        let fields = ["PageTables", "SUnreclaim", "KernelStack", "AnonPages", "Shmem", "Slab"]
        var baseMeminfo: [String: Int] = [:]
        for field in fields { baseMeminfo[field] = ScaleSystem.meminfo(field) }
        let baseAvailable = ScaleSystem.memoryAvailable(samples: 5)

        var alive: [Running] = []
        var shards: [ShardRecord] = []
        var nextIndex = 0
        var costEstimateKiB = 4 << 10
        for target in steps.sorted() {
            // A step the machine's memory cannot hold at the cost per extension seen so far still
            // grows, as far as the floor plus 2 GiB of headroom for the machine's other users,
            // and says how far it got and what the whole step would have needed.
            let available = ScaleSystem.memoryAvailable(samples: 3)
            let held = alive.count + shards.reduce(0) { $0 + $1.extensions }
            let needed = (target - held) * costEstimateKiB
            let fits = available - needed >= memoryFloorKiB
            let floorKiB = fits ? memoryFloorKiB : memoryFloorKiB + (2 << 20)
            // What this step needs, at the previous step's cost per extension (+50%).
            let last = outcome.steps.last
            limits.raise(extensions: target, tasksPerExtension: 1.5 * (last?.tasksPerExtension ?? 8),
                         mapsPerExtension: 1.5 * (last?.hostMapsPerExtension ?? 4))
            // More host processes when this one's fd table cannot hold the step.
            let plan = HostPlan(target: target, held: held, aliveHere: alive.count, shardHosts: shards.count, baseFDs: base.fileDescriptors,
                                fdsPerExtension: last?.hostFDsPerExtensionWithConnection, bench: self)
            var started: [ShardHost] = []
            var shardFailure: String?
            for count in plan.newShards {
                do {
                    started.append(try ShardHost(count: count, firstIndex: (shards.count + started.count + 1) * 10_000_000,
                                                 floorKiB: floorKiB, bench: self))
                } catch {
                    shardFailure = "\(error)"
                    break
                }
            }
            let startedHosts = started
            async let grownLines: [String?] = {
                var lines: [String?] = []
                for shard in startedHosts { lines.append(await shard.nextLine()) }
                return lines
            }()
            let grown = await grow(&alive, to: plan.hereTarget, nextIndex: &nextIndex, failures: &outcome.failures, heap: nil,
                                   phaseStart: (baseAvailable, 0), floorKiB: floorKiB, project: fits && started.isEmpty)
            var stopped = grown.stopped ?? shardFailure
            // A step stopped at the memory floor still measures its launches (they need far less
            // than the floor's margin; measure checks); one stopped by failures or time does not.
            var stoppedByMemory = grown.stopped?.hasPrefix("memory:") ?? false
            for (shard, line) in zip(started, await grownLines) {
                do {
                    let record = try ShardRecord(host: shard, grown: shard.parse(line, "grown"))
                    shards.append(record)
                    outcome.failures.merge(record.failures, from: "shard host \(shard.pid)")
                    if let reason = record.stopped {
                        if stopped == nil { stopped = "shard host \(shard.pid): \(reason)" }
                        stoppedByMemory = stoppedByMemory || (reason.hasPrefix("memory:") && shardFailure == nil)
                    }
                } catch {
                    outcome.failures.record(error, during: "shard host")
                    stopped = stopped ?? "\(error)"
                    stoppedByMemory = false
                    shardsEnded.append(await shard.end())
                }
            }
            var step = await measure(alive, shards: shards, base: base, baseAvailable: baseAvailable, baseMeminfo: baseMeminfo,
                                     failures: &outcome.failures, withLaunches: stopped == nil || stoppedByMemory,
                                     launchFloorKiB: floorKiB)
            step.hostProcessesReason = plan.reason
            step.stopped = stopped.map { reason in
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
        let count = alive.count + shards.reduce(0) { $0 + $1.extensions }
        let shardHosts = shards.map(\.host)
        async let shardEnds: [ShardHost.Ended] = withTaskGroup(of: ShardHost.Ended.self) { group in
            for host in shardHosts { group.addTask { await host.end() } }
            var ends: [ShardHost.Ended] = []
            for await end in group { ends.append(end) }
            return ends
        }
        let notEnded = await Self.end(alive)
        shardsEnded += await shardEnds
        alive = []
        await settle(base: base)
        if count > 0 {
            outcome.memoryRecoveredKiBPerExtension = Double(ScaleSystem.memoryAvailable(samples: 5) - atMaximum) / Double(count)
        }

        // The kernel frees thousands of sandboxes' memory for a while after their processes and
        // cgroups are gone: the big host's baseline waits until MemAvailable holds still.
        outcome.memorySettleSeconds = await Self.waitForSteadyMemory()

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

        // Nothing may be left: processes, fds, cgroups, zombies (nor the pool, whose idle
        // sandboxes were there at the baseline).
        await AppExtensionProcess.endWarmLaunches()
        await settle(base: base)
        let after = ScaleSystem.HostSample.now()
        // The descriptor closers are a pool of their own that stays (as the fault runs count them).
        let ownThreads = { (names: [String]) in
            names.filter { !ScaleFaults.CycleOutcome.isDispatchWorker($0) && !ScaleFaults.CycleOutcome.isDescriptorCloser($0) }.count
        }
        let closers = { (names: [String]) in names.filter(ScaleFaults.CycleOutcome.isDescriptorCloser).count }
        outcome.leftBehind = [
            "sandboxes_not_ended": notEnded + notEndedBig,
            "fds": after.fileDescriptors - base.fileDescriptors,
            // libdispatch's workers come and go with load (ScaleFaults.dispatchWorkerSlack).
            "threads_not_dispatch_workers": ownThreads(ScaleSystem.threadNames()) - ownThreads(baseThreadNames),
            // Idle closers stay by design, up to their pool's bound (UntrustedDescriptors).
            "descriptor_closers": closers(ScaleSystem.threadNames()) - closers(baseThreadNames),
            "dispatch_workers": (after.threads - base.threads) - (ownThreads(ScaleSystem.threadNames()) - ownThreads(baseThreadNames))
                - (closers(ScaleSystem.threadNames()) - closers(baseThreadNames)),
            "cgroups": after.cgroups,
            "zombies": after.zombies,
            "mounts": after.mounts - base.mounts,
        ]
        for (key, value) in ShardRecord.leftBehind(shardsEnded) {
            outcome.leftBehind[key] = value
        }
        outcome.limitsRaised = limits.descriptions
        // Asked once per step: the same refusal is reported once.
        outcome.limitsRefused = Array(Set(limits.refused)).sorted()

        // bubblewrap's sandboxes, as many as the largest complete step up to the limit had alive:
        // last, once ours are gone and counted, so that its file systems do not raise this boot's
        // high-water mark of shrinkers (which sizes every memory cgroup) before ours are made.
        let compared = outcome.steps.filter { $0.extensions > 0 && $0.extensions == $0.answered && $0.extensions <= bwrapReferenceLimit }
            .map(\.extensions).max()
        if let compared {
            _ = await Self.waitForSteadyMemory()
            if let bwrap = ["/usr/bin/bwrap", "/bin/bwrap"].first(where: { (path: String) in access(path, X_OK) == 0 }) {
                outcome.bwrapReference = await BwrapMemoryReference.measure(count: compared, bwrap: bwrap, fields: fields)
            } else {
                outcome.bwrapReference = BwrapMemoryReference(failure: "bubblewrap is not installed (scripts/bench installs it)")
            }
        }
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
