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
        var oneMoreLaunchMs = 0.0
        var rttMedianUs = 0.0
        var rttP99Us = 0.0
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
                "host_fds_per_extension_with_connection": rounded(hostFDsPerExtensionWithConnection),
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

    static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

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
        // Every `Running` holds exactly one open connection (one socket in the host).
        step.hostFDsPerExtensionWithConnection = Double(host.fileDescriptors - base.fileDescriptors) / Double(count)
        step.hostFDsPerExtension = Double(host.fileDescriptors - base.fileDescriptors - count) / Double(count)
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
}
