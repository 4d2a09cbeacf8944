import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime

/// What a step measures, and the measuring.
extension ScaleBench {
    /// What one step measured.
    struct Step {
        var extensions = 0
        var target = 0
        var stopped: String?
        var growSeconds = 0.0
        var burstLaunchesPerSecond = 0.0
        /// Each burst's rate (``burstLaunchesPerSecond`` is their median).
        var burstRoundsLaunchesPerSecond: [Double] = []
        var oneMoreLaunchMs = 0.0
        var rttMedianUs = 0.0
        var rttP99Us = 0.0
        /// More of the round trips' distribution (p50 … p99.9, max).
        var rttPercentilesUs: [String: Double] = [:]
        var answered = 0
        var hostFDs = 0
        /// Host fds per running extension, the one connection the harness keeps open to each not
        /// counted: what an extension costs the host (issue 14: at most 2), apart from the
        /// connections its host chooses to keep (one socket each: HostFileDescriptorTests).
        var hostFDsPerExtension = 0.0
        /// The same with that open connection counted.
        var hostFDsPerExtensionWithConnection = 0.0
        var hostKiBPerExtension = 0.0
        var hostThreads = 0
        /// Of ``hostThreads``, libdispatch's pool workers (ScaleFaults.dispatchWorkerSlack).
        var hostDispatchWorkers = 0
        /// Of ``hostThreads``, the closers of untrusted descriptors, started on demand and bounded
        /// in number (as `--faults` counts them: not per extension).
        var hostDescriptorClosers = 0
        /// Every thread's name, for telling which one came or went between steps.
        var hostThreadNames: [String] = []
        var memoryAvailableDropKiB = 0
        var programPSSKiB = 0.0
        var initPSSKiB = 0.0
        var machineKiBPerExtension = 0.0
        var accountedKiBPerExtension = 0.0
        var tasksPerExtension = 0.0
        var hostMapsPerExtension = 0.0
        var meminfoKiBPerExtension: [String: Double] = [:]
        /// Every host process that held the step's extensions, this one first (its figures are
        /// the ones above); more than one when one fd table could not hold them all (the reason).
        var hosts: [HostFigures] = []
        var hostProcessesReason: String?
        /// Why a step stopped at the memory floor did not measure its launches.
        var launchesNotMeasured: String?

        var json: [String: Any] {
            var result: [String: Any] = [
                "extensions": extensions, "target": target, "grow_seconds": rounded(growSeconds),
                "launches_per_s": rounded(burstLaunchesPerSecond), "launches_per_s_bursts": burstRoundsLaunchesPerSecond.map(rounded),
                "one_more_launch_ms": rounded(oneMoreLaunchMs),
                "rtt_median_us": rounded(rttMedianUs), "rtt_p99_us": rounded(rttP99Us), "answered": answered,
                "rtt_percentiles_us": rttPercentilesUs.mapValues(rounded),
                "host_fds": hostFDs, "host_fds_per_extension": rounded(hostFDsPerExtension),
                "host_fds_per_extension_with_connection": rounded(hostFDsPerExtensionWithConnection),
                "host_kib_per_extension": rounded(hostKiBPerExtension), "host_threads": hostThreads,
                "host_dispatch_workers": hostDispatchWorkers, "host_descriptor_closers": hostDescriptorClosers,
                "host_thread_names": hostThreadNames,
                "memavailable_drop_kib": memoryAvailableDropKiB, "extension_pss_kib": rounded(programPSSKiB),
                "init_pss_kib": rounded(initPSSKiB), "machine_kib_per_extension": rounded(machineKiBPerExtension),
                "accounted_kib_per_extension": rounded(accountedKiBPerExtension),
                "tasks_per_extension": rounded(tasksPerExtension), "host_maps_per_extension": rounded(hostMapsPerExtension),
                "meminfo_kib_per_extension": meminfoKiBPerExtension.mapValues(rounded),
            ]
            if let stopped { result["stopped"] = stopped }
            result["host_processes"] = hosts.count
            result["hosts"] = hosts.map(\.json)
            if let hostProcessesReason { result["host_processes_reason"] = hostProcessesReason }
            if let launchesNotMeasured { result["launches_not_measured"] = launchesNotMeasured }
            return result
        }
    }

    static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

    /// Measures the host and the machine with `alive` running here and the `shards`' extensions in
    /// their processes, against `base` (this host before the first launch) and the MemAvailable
    /// of that moment. Host figures are this process's own (each shard's in ``Step/hosts``);
    /// machine figures and round trips are over every extension.
    func measure(_ alive: [Running], shards: [ShardRecord] = [], base: ScaleSystem.HostSample, baseAvailable: Int,
                 baseMeminfo: [String: Int], failures: inout Failures, withLaunches: Bool,
                 launchFloorKiB: Int? = nil) async -> Step {
        var step = Step()
        let count = alive.count
        let total = count + shards.reduce(0) { $0 + $1.extensions }
        step.extensions = total
        guard total > 0 else { return step }
        // Let the launches' transient allocations settle before reading memory.
        try? await Task.sleep(for: .seconds(1))
        let host = ScaleSystem.HostSample.now()
        let available = ScaleSystem.memoryAvailable(samples: 5)
        let here = Double(max(count, 1))
        step.hostFDs = host.fileDescriptors
        // Every `Running` holds exactly one open connection (one socket in the host); the bench
        // holds one socket to each shard host, which no extension costs.
        let extensionFDs = host.fileDescriptors - base.fileDescriptors - shards.count
        step.hostFDsPerExtensionWithConnection = Double(extensionFDs) / here
        step.hostFDsPerExtension = Double(extensionFDs - count) / here
        step.hostKiBPerExtension = Double(host.anonymousKiB - base.anonymousKiB) / here
        step.hostThreads = host.threads
        // libdispatch's pool workers come and go with load, not with extensions.
        step.hostThreadNames = ScaleSystem.threadNames().sorted()
        step.hostDispatchWorkers = step.hostThreadNames.filter(ScaleFaults.CycleOutcome.isDispatchWorker).count
        step.hostDescriptorClosers = step.hostThreadNames.filter(ScaleFaults.CycleOutcome.isDescriptorCloser).count
        step.hostMapsPerExtension = Double(host.memoryMaps - base.memoryMaps) / here
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        step.hosts = [HostFigures(pid: getpid(), role: "bench", extensions: count, fdLimit: Int(truncatingIfNeeded: limit.rlim_cur),
                                  fds: host.fileDescriptors, fdsPerExtension: step.hostFDsPerExtension,
                                  fdsPerExtensionWithConnection: step.hostFDsPerExtensionWithConnection,
                                  kibPerExtension: step.hostKiBPerExtension, threads: host.threads, growSeconds: 0)]
            + shards.map(\.figures)
        step.memoryAvailableDropKiB = baseAvailable - available
        for (field, before) in baseMeminfo {
            step.meminfoKiBPerExtension[field] = Double((ScaleSystem.meminfo(field) ?? before) - before) / Double(total)
        }

        // The programs' own memory and tasks, from up to 50 extensions spread over all hosts.
        var pids = alive.compactMap { running in running.programPID.map { (initPID: running.initPID, programPID: $0) } }
        for shard in shards { pids += shard.samplePIDs }
        let sampleStride = max(pids.count / 50, 1)
        var programPSS: [Double] = [], initPSS: [Double] = [], tasks: [Double] = []
        for index in stride(from: 0, to: pids.count, by: sampleStride) {
            let (initPID, program) = pids[index]
            guard let pss = ScaleSystem.proportionalSetSize(of: program),
                  let initPss = ScaleSystem.proportionalSetSize(of: initPID) else { continue }
            programPSS.append(Double(pss))
            initPSS.append(Double(initPss))
            tasks.append(Double((ScaleSystem.status("Threads", of: "\(program)") ?? 0) + (ScaleSystem.status("Threads", of: "\(initPID)") ?? 0)))
        }
        step.programPSSKiB = programPSS.isEmpty ? 0 : programPSS.reduce(0, +) / Double(programPSS.count)
        step.initPSSKiB = initPSS.isEmpty ? 0 : initPSS.reduce(0, +) / Double(initPSS.count)
        step.tasksPerExtension = tasks.isEmpty ? 0 : tasks.reduce(0, +) / Double(tasks.count)
        step.machineKiBPerExtension = Double(step.memoryAvailableDropKiB) / Double(total) - step.programPSSKiB
        // A cross-check little moved by other programs on a shared machine: the init's own memory
        // and the kernel's page tables, stacks and unreclaimable slab the N sandboxes added.
        step.accountedKiBPerExtension = step.initPSSKiB + ["PageTables", "KernelStack", "SUnreclaim"]
            .reduce(0) { $0 + (step.meminfoKiBPerExtension[$1] ?? 0) }

        // Every extension answers; round trips round-robin over all of them, one host after the
        // other (each host's share in proportion to its extensions).
        let message = ExtensionMessage([UInt8](repeating: UInt8(ascii: "x"), count: 64))
        let requests = max(total, minimumRoundTrips)
        var samples: [Double] = []
        var answered = Set<Int>()
        if count > 0 {
            for request in 0..<max(requests * count / total, count) {
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
        }
        step.answered = answered.count
        for shard in shards where shard.extensions > 0 {
            shard.host.send("rtt \(max(requests * shard.extensions / total, shard.extensions))")
            do {
                let report = try shard.host.parse(await shard.host.nextLine(), "rtt")
                samples += (report["samples_100ns"] as? [Int] ?? []).map { Double($0) / 1e7 }
                step.answered += report["answered"] as? Int ?? 0
                failures.merge(report["failures"] as? [String: Int] ?? [:], from: "shard host \(shard.host.pid)")
            } catch {
                failures.record(error, during: "round trips")
            }
        }
        samples.sort()
        if !samples.isEmpty {
            step.rttMedianUs = samples[samples.count / 2] * 1e6
            step.rttP99Us = samples[min(Int((Double(samples.count) * 0.99).rounded(.up)) - 1, samples.count - 1)] * 1e6
            // The shape of the tail: a second mode near 180 us shows at every N on this VM.
            for percentile in [50.0, 90, 95, 98, 99, 99.9] {
                let index = min(Int((Double(samples.count) * percentile / 100).rounded(.up)) - 1, samples.count - 1)
                step.rttPercentilesUs["p\(percentile.formatted(.number.grouping(.never)))"] = samples[max(index, 0)] * 1e6
            }
            step.rttPercentilesUs["max"] = samples[samples.count - 1] * 1e6
        }

        guard withLaunches else { return step }
        // Up to a burst's worth more extensions at once: twice their cost so far must stay above
        // the floor.
        if let floor = launchFloorKiB {
            let needed = 2 * (burstLaunches + 1) * max(step.memoryAvailableDropKiB / total, 0)
            let available = ScaleSystem.memoryAvailable(samples: 3)
            if available - needed < floor {
                step.launchesNotMeasured = "memory: \(burstLaunches + 1) more launches would take MemAvailable "
                    + "(\(available / 1024) MiB) within \(needed / 1024) MiB of the \(floor / 1024) MiB floor"
                return step
            }
        }
        // One more launch, sequentially, to its first reply; then a burst.
        var singles: [Double] = []
        var extra: [Running] = []
        for index in 0..<singleLaunches {
            await awaitFullPool()
            let start = now()
            do {
                extra.append(try await launch("xsb-bench.scale.one-more-\(total)-\(index)"))
                singles.append(now() - start)
            } catch {
                failures.record(error, during: "one more launch")
            }
        }
        await Self.end(extra)
        singles.sort()
        step.oneMoreLaunchMs = singles.isEmpty ? 0 : singles[singles.count / 2] * 1000
        // A burst lasts a fifth of a second at 10 alive: one alone moved the 10 step's rate by
        // half between runs on a quiet machine. The median of a few, each ended before the next
        // (so N stays where it is), is steadier.
        var rates: [Double] = []
        for round in 0..<burstRounds {
            await awaitFullPool()
            let burst = await launchBatch(count: burstLaunches, width: concurrency, prefix: "xsb-bench.scale.burst-\(total)-\(round)", failures: &failures)
            rates.append(Double(burst.running.count) / burst.seconds)
            await Self.end(burst.running)
        }
        step.burstRoundsLaunchesPerSecond = rates
        step.burstLaunchesPerSecond = rates.sorted()[rates.count / 2]
        return step
    }
}
