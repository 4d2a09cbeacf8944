import Foundation
import Glibc

/// The scale bench's outcome as the table `scripts/bench --scale` prints and the keys its
/// `--json` report carries (issue 14's targets).
struct ScaleReport {
    var lines: [String] = []
    var json: [String: Any] = [:]
    var targets: [String: String] = [:]

    init(_ outcome: ScaleBench.Outcome, bench: ScaleBench) {
        let steps = outcome.steps
        func step(_ n: Int) -> ScaleBench.Step? { steps.first { $0.target == n && $0.extensions == n && $0.stopped == nil } }
        // The largest number that ran at once with every one answering.
        let complete = steps.filter { $0.extensions > 0 && $0.answered == $0.extensions }
        let largest = complete.max { $0.extensions < $1.extensions }
        let threads = steps.filter { $0.extensions > 0 }.map(\.hostThreads)
        // Constant: the host's own threads (not libdispatch's pool workers, which come and go with
        // load) vary by at most one, and the workers stay within the slack the fault runs allow.
        let ownThreads = steps.filter { $0.extensions > 0 }.map { $0.hostThreads - $0.hostDispatchWorkers - $0.hostDescriptorClosers }
        let workers = steps.filter { $0.extensions > 0 }.map(\.hostDispatchWorkers)
        let threadsConstant = ownThreads.isEmpty ? false
            : (ownThreads.max()! - ownThreads.min()! <= 1 && workers.max()! - workers.min()! <= ScaleFaults.dispatchWorkerSlack)
        let rateRatio: Double? = {
            guard let small = step(10), let large = step(1_000), small.burstLaunchesPerSecond > 0 else { return nil }
            return large.burstLaunchesPerSecond / small.burstLaunchesPerSecond
        }()
        let rttRatio: Double? = step(1_000).flatMap { $0.rttMedianUs > 0 ? $0.rttP99Us / $0.rttMedianUs : nil }
        let big = outcome.bigHost

        func put(_ key: String, _ value: Double?) { json[key] = value.map(ScaleBench.rounded) ?? NSNull() }
        json["scale_extensions"] = largest?.extensions ?? 0
        // Host figures (fds, KiB, threads per extension) are per host: this process's below, every
        // host's in the step's `hosts`.
        json["scale_host_processes"] = largest?.hosts.count ?? 0
        json["scale_failed"] = outcome.failures.count
        put("host_fds_per_extension", largest?.hostFDsPerExtension)
        put("host_fds_per_extension_with_connection", largest?.hostFDsPerExtensionWithConnection)
        put("host_kib_per_extension", largest?.hostKiBPerExtension)
        json["host_threads"] = Dictionary(steps.filter { $0.extensions > 0 }.map { ("\($0.extensions)", $0.hostThreads) }) { $1 }
        json["host_threads_constant"] = threadsConstant
        json["host_threads_not_dispatch_workers"] = Dictionary(steps.filter { $0.extensions > 0 }
            .map { ("\($0.extensions)", $0.hostThreads - $0.hostDispatchWorkers - $0.hostDescriptorClosers) }) { $1 }
        put("machine_kib_per_extension", largest?.machineKiBPerExtension)
        put("machine_kib_per_extension_big_host", big.flatMap { $0.extensions > 0 ? $0.machineKiBPerExtension : nil })
        // Not a target: how much of machine_kib_per_extension is the sandbox's memory cgroup at
        // its emptiest, a cost this boot's history sets (ScaleSystem.emptyMemoryCgroupKiB).
        let memoryCgroup = outcome.emptyMemoryCgroupKiB
        let beyondMemoryCgroup = largest.flatMap { step in memoryCgroup.map { step.machineKiBPerExtension - $0 } }
        put("memory_cgroup_empty_kib", memoryCgroup)
        put("machine_kib_per_extension_beyond_memory_cgroup", beyondMemoryCgroup)
        // Not a target: bubblewrap's sandboxes measured the same way in the same run, and ours
        // against them at the same N (BwrapMemoryReference).
        let bwrap = outcome.bwrapReference.flatMap { $0.failure == nil ? $0 : nil }
        let compared = bwrap.flatMap { reference in complete.first { $0.extensions == reference.sandboxes } }
        let vsBwrap = bwrap.flatMap { reference in compared.map { $0.machineKiBPerExtension / reference.machineKiBPerSandbox } }
        let accountedVsBwrap = bwrap.flatMap { reference in compared.map { $0.accountedKiBPerExtension / reference.accountedKiBPerSandbox } }
        put("machine_kib_per_sandbox_bwrap", bwrap?.machineKiBPerSandbox)
        put("machine_kib_per_extension_vs_bwrap", vsBwrap)
        put("accounted_kib_per_extension_vs_bwrap", accountedVsBwrap)
        json["bwrap_reference"] = outcome.bwrapReference?.json ?? NSNull()
        put("launch_rate_ratio_1000_vs_10", rateRatio)
        put("rtt_p99_vs_median_1000", rttRatio)
        json["scale_pool_size"] = bench.poolSize
        put("pool_kib_per_sandbox", outcome.poolKiBPerSandbox)
        var failureMessages: [[String: Any]] = []
        for (message, count) in outcome.failures.messages.sorted(by: { $0.value > $1.value }).prefix(20) {
            failureMessages.append(["message": message, "count": count])
        }
        json["scale"] = [
            "policy": bench.policyPath, "extension": bench.extensionPath, "concurrency": bench.concurrency,
            "steps": steps.map(\.json), "big_host": big.map { step -> [String: Any] in
                var details = step.json
                details["heap_mib"] = bench.bigHostHeapBytes >> 20
                return details
            } ?? NSNull(),
            "limits_raised": outcome.limitsRaised, "limits_not_raised": outcome.limitsRefused, "limits_hit": outcome.failures.limitsHit,
            "failures": failureMessages, "left_behind": outcome.leftBehind,
            "memory_recovered_kib_per_extension_at_teardown": ScaleBench.rounded(outcome.memoryRecoveredKiBPerExtension),
            "memory_floor_mib": bench.memoryFloorKiB / 1024,
            "memory_settle_seconds_before_big_host": ScaleBench.rounded(outcome.memorySettleSeconds),
        ] as [String: Any]

        // The issue's target, whatever steps this run was asked for.
        let goal = 10_000
        targets = [
            "scale_extensions": ">= \(goal)", "scale_failed": "== 0", "host_fds_per_extension": "<= 2",
            "host_kib_per_extension": "<= 64", "host_threads_constant": "true", "machine_kib_per_extension": "<= 512",
            "machine_kib_per_extension_big_host": "<= 512", "launch_rate_ratio_1000_vs_10": ">= 0.8",
            "rtt_p99_vs_median_1000": "<= 4",
        ]

        lines.append("scale: the echo extension at a `hardened` point through the host API, each answering; N alive")
        lines.append("N alive  launches/s  one more ms  RTT med us  RTT p99 us  host fds/ext  host KiB/ext  threads  machine KiB/ext  ext PSS KiB  accounted KiB/ext")
        for step in steps {
            if step.extensions > 0 && step.answered > 0 {
                lines.append(String(format: "%7d  %10.1f  %11.1f  %10.1f  %10.1f  %12.2f  %12.1f  %7d  %15.0f  %11.0f  %17.0f",
                                    step.extensions, step.burstLaunchesPerSecond, step.oneMoreLaunchMs, step.rttMedianUs, step.rttP99Us,
                                    step.hostFDsPerExtension, step.hostKiBPerExtension, step.hostThreads,
                                    step.machineKiBPerExtension, step.programPSSKiB, step.accountedKiBPerExtension))
            }
            if step.hosts.count > 1 {
                lines.append("  \(step.extensions) alive in \(step.hosts.count) host processes (host columns: the first only): "
                             + (step.hostProcessesReason ?? ""))
                for host in step.hosts {
                    lines.append(String(format: "    %@ %d: %d extensions, %d fds (limit %d), %.2f fds/ext (%.2f with the connection), %.1f KiB/ext, %d threads",
                                        host.role, host.pid, host.extensions, host.fds, host.fdLimit, host.fdsPerExtension,
                                        host.fdsPerExtensionWithConnection, host.kibPerExtension, host.threads))
                }
            }
            if let stopped = step.stopped { lines.append("  step \(step.target) stopped at \(step.extensions) alive: \(stopped)") }
            if let skipped = step.launchesNotMeasured { lines.append("  launches not measured: \(skipped)") }
        }
        if let big {
            lines.append(String(format: "big host (%d MiB heap rewritten before each launch): %d alive, machine %.0f KiB/ext, ext PSS %.0f KiB",
                                bench.bigHostHeapBytes >> 20, big.extensions, big.machineKiBPerExtension, big.programPSSKiB))
            if let stopped = big.stopped { lines.append("  stopped: \(stopped)") }
        }
        func verdict(_ met: Bool) -> String { met ? "met" : "MISSED" }
        func row(_ key: String, _ value: Double?, _ target: String, _ met: (Double) -> Bool) {
            let text = value.map { String(format: "%10.2f", $0) } ?? "         -"
            lines.append(key.padding(toLength: 36, withPad: " ", startingAt: 0) + text + "  " + target.padding(toLength: 10, withPad: " ", startingAt: 0)
                         + (value.map { verdict(met($0)) } ?? "MISSED (not measured)"))
        }
        lines.append("")
        lines.append("metric                                   value  target")
        row("scale_extensions", Double(largest?.extensions ?? 0), ">= \(goal)") { $0 >= Double(goal) }
        row("scale_failed", Double(outcome.failures.count), "== 0") { $0 == 0 }
        row("host_fds_per_extension", largest?.hostFDsPerExtension, "<= 2") { $0 <= 2 }
        lines.append("  (+ 1 per open connection: \(largest.map { String(format: "%.2f", $0.hostFDsPerExtensionWithConnection) } ?? "-") with the one each keeps open)")
        row("host_kib_per_extension", largest?.hostKiBPerExtension, "<= 64") { $0 <= 64 }
        lines.append("host_threads_constant".padding(toLength: 36, withPad: " ", startingAt: 0)
                     + "\(threads)".padding(toLength: 12, withPad: " ", startingAt: 0) + "constant  " + verdict(threadsConstant)
                     + "  (not libdispatch workers nor descriptor closers: \(ownThreads); workers may vary by \(ScaleFaults.dispatchWorkerSlack))")
        // MemAvailable moves with every other program on the machine: a value is met only when the
        // accounted cross-check agrees.
        row("machine_kib_per_extension", largest?.machineKiBPerExtension, "<= 512") { $0 <= 512 && (largest?.accountedKiBPerExtension ?? .infinity) <= 512 }
        lines.append("  of which one empty memory cgroup: " + (memoryCgroup.map { String(format: "%.0f KiB", $0) } ?? "not measured")
                     + " on this boot (its shrinker table: 1 KiB per 64 of the most file systems this boot ever had mounted at once); beyond it: "
                     + (beyondMemoryCgroup.map { String(format: "%.0f KiB", $0) } ?? "-"))
        if let reference = outcome.bwrapReference {
            if let failure = reference.failure {
                lines.append("  bubblewrap reference: not measured: \(failure)")
            } else {
                lines.append(String(format: "  bubblewrap reference, %d sandboxes alive (the same namespaces, no memory cgroup, 2 processes besides the program): "
                                    + "%.0f KiB each beyond its program's PSS (accounted %.0f); ours at %d: %@ (accounted: %@)",
                                    reference.sandboxes, reference.machineKiBPerSandbox, reference.accountedKiBPerSandbox, reference.sandboxes,
                                    vsBwrap.map { String(format: "%.2f of it", $0) } ?? "-",
                                    accountedVsBwrap.map { String(format: "%.2f", $0) } ?? "-"))
            }
        }
        row("machine_kib_per_extension_big_host", big.flatMap { $0.extensions > 0 ? $0.machineKiBPerExtension : nil }, "<= 512") {
            $0 <= 512 && (big?.accountedKiBPerExtension ?? .infinity) <= 512
        }
        row("launch_rate_ratio_1000_vs_10", rateRatio, ">= 0.8") { $0 >= 0.8 }
        row("rtt_p99_vs_median_1000", rttRatio, "<= 4") { $0 <= 4 }
        lines.append("limits raised: " + (outcome.limitsRaised.isEmpty ? "none" : outcome.limitsRaised.joined(separator: ", ")))
        lines.append("limits not raised: " + (outcome.limitsRefused.isEmpty ? "none" : outcome.limitsRefused.joined(separator: "; ")))
        lines.append("limits hit: " + (outcome.failures.limitsHit.isEmpty ? "none" : outcome.failures.limitsHit.joined(separator: "; ")))
        for (message, count) in outcome.failures.messages.sorted(by: { $0.value > $1.value }).prefix(5) {
            lines.append("  failure x\(count): \(message)")
        }
        // Fewer than at the start is nothing left; idle descriptor closers stay by design.
        let left = outcome.leftBehind.filter {
            $0.value > 0 && $0.key != "descriptor_closers" && ($0.key != "dispatch_workers" || $0.value > ScaleFaults.dispatchWorkerSlack)
        }
        lines.append("left behind: " + (left.isEmpty ? "nothing" : left.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")))
        lines.append("machine KiB/ext: MemAvailable drop / N minus the extension's PSS (moved by other programs on a shared machine, "
                     + "most at small N); accounted: the init's PSS + page tables, kernel stacks, unreclaimable slab added per extension; "
                     + "met only when both are <= 512")
        lines.append(String(format: "memory given back at teardown: %.0f KiB per extension (MemAvailable; the machine is shared)",
                            outcome.memoryRecoveredKiBPerExtension))
    }
}
