import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import SandboxSystem

/// `xsb-bench`: launch and extension-IPC benchmarks, each reported as a median and as a ratio
/// against a reference measured in the same run (absolute times across runs mean little on
/// shared machines).
///
///     xsb-bench [--json] [--iterations N] [--rounds N] [--only launch|container|ipc|discovery] [--breakdown]
///               [--policy PATH] [--cli PATH] [--extension PATH] [--pingpong PATH]
///     xsb-bench --only ipc (--profile-rtt N | --profile-connect N | --profile-tp N | --profile-distributed N) [--policy PATH] [--extension PATH]
///     xsb-bench [--scale [--scale-steps 10,100,1000,10000] [--big-host N] [--memory-floor-mib N] [--scale-pool N]] [--faults [--cycles N]] [--json]
///               [--scale-policy PATH] [--extension PATH] [--scale-c-extension]
///     xsb-bench --pooled-probe PROBE [--policy PATH] -- CHECK...    (for PooledIsolationTests)
///     xsb-bench --cycles-only N [--cycle-workers N] [--cycle-time-limit SECONDS] | --child-host N    (for ScaleFaultTests)
///
/// `--iterations` counts launch runs (default 200), `--rounds` interleaved IPC rounds (default
/// 30; see ``IPCBench``). `--breakdown` adds where a round trip's time goes (see
/// ``Breakdown``). The extension (`xsb-echo-extension`) and the raw C reference
/// (`xsb-pingpong`) default to the files next to this executable. `--profile-rtt N` only runs N
/// host-API round trips (with CPU time and context switches per round trip), `--profile-connect N` only N connects (each followed by its first reply),
/// `--profile-tp N` only N throughput samples, `--profile-distributed N` only N small distributed
/// calls and N/10 1 MiB ones (`--profile-distributed-bulk M`: M) (with CPU time and context switches per call), and prints their median: for `perf record`
/// sessions and A/B runs. `--scale` and `--faults` measure scale and host-level faults over the
/// host API at a `hardened` point (``ScaleBench``, ``ScaleFaults``); `--cycles-only N` prints one
/// cycle run as JSON (exit 1 if something grew), `--child-host N` launches N extensions, prints
/// their pids and waits to be killed. `--scale-shard-host N` is a host `--scale` starts itself for
/// steps one process's fd limit cannot hold (``ShardHost``).
@main
struct XsbBench {
    static func main() async throws {
        var arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "host-size" { return try await HostSizeBench.run(arguments: arguments) }
        func option(_ name: String) -> String? {
            guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
            defer { arguments.removeSubrange(index...index + 1) }
            return arguments[index + 1]
        }
        let json = arguments.contains("--json")
        let breakdown = arguments.contains("--breakdown")
        let iterations = Int(option("--iterations") ?? "") ?? 200
        let rounds = Int(option("--rounds") ?? "") ?? 30
        let only = option("--only")
        guard only == nil || only == "launch" || only == "container" || only == "ipc" || only == "discovery" else {
            FileHandle.standardError.write(Data("xsb-bench: --only takes launch, container, ipc or discovery\n".utf8))
            exit(2)
        }
        let ownDirectory = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]).deletingLastPathComponent().path
        let cli = option("--cli") ?? ownDirectory + "/extsandbox"
        // The sandbox wants absolute executable paths.
        func absolute(_ path: String) -> String { URL(fileURLWithPath: path).standardizedFileURL.path }
        let pingpongPath = absolute(option("--pingpong") ?? ownDirectory + "/xsb-pingpong")
        // --scale-c-extension: the scale runs use the minimal C extension (`xsb-pingpong extension`).
        let extensionPath = absolute(option("--extension") ?? ownDirectory + "/xsb-echo-extension")
        let actorsExtensionPath = absolute(option("--actors-extension") ?? ownDirectory + "/xsb-actors-extension")
        let cExtension = arguments.contains("--scale-c-extension")
        let scaleExtensionPath = cExtension ? pingpongPath : extensionPath
        let scaleExtensionArguments = cExtension ? ["extension"] : []
        let policyPath = option("--policy")
        let policy = try policyPath.map { try PolicyLoader.load(file: $0) }
            ?? PolicyLoader.load(nameOrPath: "standard", searchPath: .default(executablePath: ownDirectory + "/xsb-bench"))

        // Scale and host-level faults (ScaleBench, ScaleFaults): a `hardened` point by default.
        let scalePolicy = option("--scale-policy")
            ?? policyPath.map { URL(fileURLWithPath: $0).deletingLastPathComponent().path + "/hardened.yaml" } ?? "hardened"
        var faults = ScaleFaults(extensionPath: extensionPath, policyPath: scalePolicy)
        if let workers = Int(option("--cycle-workers") ?? ""), workers > 0 { faults.workers = workers }
        if let count = Int(option("--child-host") ?? "") {
            try await faults.childHost(extensions: count)
        }
        // A shard host of `--scale` (ScaleShards.swift), started by the bench itself.
        if let count = Int(option("--scale-shard-host") ?? "") {
            await ScaleBench(extensionPath: scaleExtensionPath, extensionArguments: scaleExtensionArguments, policyPath: scalePolicy)
                .shardHost(count: count, firstIndex: Int(option("--scale-shard-first") ?? "") ?? 0,
                           floorKiB: Int(option("--scale-shard-floor-kib") ?? "") ?? ScaleBench(extensionPath: "", policyPath: "").memoryFloorKiB)
        }
        // For PooledIsolationTests: each probe check warm and cold, as whoever runs this.
        if let probe = option("--pooled-probe") {
            exit(try await WarmLaunchBench.probeWarmAndCold(probe: probe, policy: policy, checks: Array(arguments.drop { $0 != "--" }.dropFirst())))
        }
        if let count = Int(option("--warm-only") ?? "") {
            try await WarmLaunchBench.warmOnly(policy: policy, bwrap: "/usr/bin/bwrap", iterations: count)
            exit(0)
        }
        if let count = Int(option("--cycles-only") ?? "") {
            let outcome = await faults.cycles(count, timeLimit: Double(option("--cycle-time-limit") ?? ""))
            let data = try JSONSerialization.data(withJSONObject: outcome.json, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
            exit(outcome.met ? 0 : 1)
        }
        if arguments.contains("--scale") || arguments.contains("--faults") {
            let steps = (option("--scale-steps") ?? "10,100,1000,10000").split(separator: ",").compactMap { Int($0) }
            let bigHost = Int(option("--big-host") ?? "") ?? 100
            let cycles = Int(option("--cycles") ?? "") ?? 10_000
            var bench = ScaleBench(extensionPath: scaleExtensionPath, extensionArguments: scaleExtensionArguments, policyPath: scalePolicy,
                                   steps: steps, bigHostExtensions: bigHost)
            if let text = option("--bwrap-reference") {
                guard let limit = Int(text), limit >= 0 else {
                    FileHandle.standardError.write(Data("xsb-bench: --bwrap-reference takes a number of sandboxes (0: none)\n".utf8))
                    exit(2)
                }
                bench.bwrapReferenceLimit = limit
            }
            // --scale-pool N: every launch of the scale run from a pool of N pre-built sandboxes.
            if let text = option("--scale-pool") {
                guard let size = Int(text), (1...64).contains(size) else {
                    FileHandle.standardError.write(Data("xsb-bench: --scale-pool takes a number of pre-built sandboxes, 1 to 64\n".utf8))
                    exit(2)
                }
                bench.poolSize = size
            }
            // --memory-floor-mib: how much MemAvailable a step leaves the machine (4 GiB unless
            // said; at least 1 GiB, so that the machine itself keeps working).
            if let text = option("--memory-floor-mib") {
                guard let mib = Int(text), mib >= 1024 else {
                    FileHandle.standardError.write(Data("xsb-bench: --memory-floor-mib takes a number of MiB, at least 1024\n".utf8))
                    exit(2)
                }
                bench.memoryFloorKiB = mib << 10
            }
            try await runScale(scale: arguments.contains("--scale"), faults: arguments.contains("--faults"), json: json,
                               bench: bench, faults: faults, cycles: cycles)
            return
        }

        let loadBefore = loadAverage()
        var report: [String: Any] = ["cgroup_limits": Supervisor.shared.hasCgroupLimits]
        var targets: [String: String] = [:]
        var table: [String] = []

        if only == nil || only == "launch" {
            guard let bwrap = ["/usr/bin/bwrap", "/bin/bwrap"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
                FileHandle.standardError.write(Data("xsb-bench: bubblewrap is missing (scripts/bench installs it)\n".utf8))
                exit(2)
            }
            let (medians, warm) = try await launchBench(policy: policy, cli: cli, bwrap: bwrap, iterations: iterations)
            let bwrapMedian = medians["bwrap"]!
            report["iterations"] = iterations
            report["median_ms"] = medians.mapValues { ($0 * 1000 * 1000).rounded() / 1000 }
            report["launch_api_vs_bwrap"] = rounded(medians["launch_api"]! / bwrapMedian)
            report["exec_cli_vs_bwrap"] = rounded(medians["exec_cli"]! / bwrapMedian)
            report["launch_api_vs_bare_spawn"] = rounded(medians["launch_api"]! / medians["bare_spawn"]!)
            report["launch_warm_vs_bwrap"] = rounded(medians["launch_warm"]! / bwrapMedian)
            report["pool_kib_per_sandbox"] = (warm.kibPerSandbox * 10).rounded() / 10
            report["pool_refill_per_second"] = (warm.refillRate * 10).rounded() / 10
            report["burst_200_pool_8_median_vs_bwrap"] = rounded(warm.burst.median / bwrapMedian)
            report["burst_200_pool_8_p90_vs_bwrap"] = rounded(warm.burst.p90 / bwrapMedian)
            targets["launch_api_vs_bwrap"] = "<= 1.0"
            targets["exec_cli_vs_bwrap"] = "<= 2.0"
            targets["launch_warm_vs_bwrap"] = "<= 0.3"
            table.append("launch of /bin/true to exit, \(iterations) interleaved runs, median")
            table.append("variant                          median ms   vs bwrap")
            for (key, label) in [("launch_api", "runtime launch API (full sandbox)"), ("launch_warm", "launch API from a ready pool"),
                                 ("exec_cli", "extsandbox exec -- /bin/true"),
                                 ("bwrap", "bwrap --unshare-all (reference)"), ("bare_spawn", "bare spawn of /bin/true")] {
                let ms = medians[key]! * 1000
                table.append(label.padding(toLength: 33, withPad: " ", startingAt: 0) + String(format: "%9.3f   %8.2f", ms, medians[key]! / bwrapMedian))
            }
            table.append(String(format: "pool of %d: %.0f KiB per idle sandbox, refill %.1f sandboxes/s; a burst of 200 launches: median %.2f, p90 %.2f x bwrap",
                                WarmLaunchBench.poolSize, warm.kibPerSandbox, warm.refillRate, warm.burst.median / bwrapMedian, warm.burst.p90 / bwrapMedian))
            table.append("targets: launch_api_vs_bwrap <= 1.0, exec_cli_vs_bwrap <= 2.0, launch_warm_vs_bwrap <= 0.3")
            if FileManager.default.isExecutableFile(atPath: extensionPath) {
                let firstReply = try await FirstReplyBench(extensionPath: extensionPath, securityLevel: policyPath ?? "standard")
                    .run(iterations: min(iterations, 50))
                let warmReply = median(firstReply.warm), coldReply = median(firstReply.cold)
                report["first_reply_warm_ms"] = rounded(warmReply * 1000)
                report["first_reply_cold_ms"] = rounded(coldReply * 1000)
                report["first_reply_warm_vs_cold"] = rounded(warmReply / coldReply)
                table.append(String(format: "launch to first reply of the echo extension through the host API, %d alternating runs, median: warm %.3f ms, cold %.3f ms (%.2f)",
                                    firstReply.warm.count, warmReply * 1000, coldReply * 1000, warmReply / coldReply))
            }
        }

        if only == nil || only == "container" {
            try await ContainerBench.report(into: &report, targets: &targets, table: &table, extensionPath: extensionPath,
                                            securityLevel: policyPath ?? "standard", iterations: min(iterations, 50))
        }

        if only == nil || only == "ipc" {
            for (path, product) in [(extensionPath, "xsb-echo-extension"), (pingpongPath, "xsb-pingpong")]
            where !FileManager.default.isExecutableFile(atPath: path) {
                FileHandle.standardError.write(Data("xsb-bench: \(path) is missing (swift build --product \(product))\n".utf8))
                exit(2)
            }
            let bench = IPCBench(extensionPath: extensionPath, pingpongPath: pingpongPath,
                                 securityLevel: policyPath ?? "standard", rounds: rounds)
            if let count = Int(option("--profile-connect") ?? "") {
                let samples = try await bench.connectsOnly(count: count)
                print(String(format: "%d connects, median %.1f us", count, median(samples) * 1e6))
                return
            }
            if let count = Int(option("--profile-tp") ?? "") {
                let samples = try await bench.throughputsOnly(count: count).map { $0 / 1048576 }
                print(String(format: "tp median %.0f MiB/s, below 3000: %d of %d", median(samples), samples.filter { $0 < 3000 }.count, count))
                return
            }
            if let count = Int(option("--profile-distributed") ?? "") {
                let distributed = DistributedBench(actorsExtensionPath: actorsExtensionPath, raw: bench, rounds: 1)
                let (small, bulk) = try await distributed.profile(count: count, bulkCount: Int(option("--profile-distributed-bulk") ?? "") ?? count / 10)
                for (label, p) in [("small call", small), ("1 MiB call", bulk)] where p.calls > 0 {
                    let n = Double(p.calls)
                    print(String(format: "%@: %d calls, %@, host cpu %.1f us, %.2f cs; extension cpu %.1f us, %.2f cs per call", label, p.calls,
                                 label == "small call" ? String(format: "median %.1f us", median(p.wall) * 1e6)
                                                       : String(format: "median %.0f MiB/s", median(p.wall) / 1048576),
                                 p.host.cpu / n * 1e6, p.host.switches / n, p.ext.cpu / n * 1e6, p.ext.switches / n))
                }
                return
            }
            if let count = Int(option("--profile-rtt") ?? "") {
                let (samples, host, ext) = try await bench.roundTripsOnly(count: count)
                let sorted = samples.sorted(), p99 = sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
                let n = Double(max(count, 1))
                print(String(format: "%d host-API round trips, median %.1f us, p99 %.1f us, host cpu %.1f us, %.2f cs; extension cpu %.1f us, %.2f cs per round trip",
                             count, median(samples) * 1e6, p99 * 1e6, host.cpu / n * 1e6, host.switches / n, ext.cpu / n * 1e6, ext.switches / n))
                return
            }
            let results = try await bench.run()
            let rttAPI = median(results.rttAPI), rttRaw = median(results.rttRaw)
            let rttRawSame = median(results.rttRawSameCPU), rttRawCross = median(results.rttRawCrossCPU)
            let throughputAPI = median(results.throughputAPI), throughputRaw = median(results.throughputRaw)
            let connect = median(results.connect)
            let suspendResume = median(results.suspendResume), killToInterruption = median(results.killToInterruption)
            let ratios = (rtt: rttAPI / rttRaw, throughput: throughputAPI / throughputRaw, connect: connect / rttAPI)
            report["rtt_64b_vs_raw"] = rounded(ratios.rtt)
            report["throughput_1mib_vs_raw"] = rounded(ratios.throughput)
            report["connect_vs_rtt"] = rounded(ratios.connect)
            report["suspend_resume_ms"] = rounded(suspendResume * 1000)
            report["kill_to_interruption_ms"] = rounded(killToInterruption * 1000)
            report["ipc"] = [
                "rounds": rounds,
                "samples": ["rtt": results.rttAPI.count, "rtt_raw": results.rttRaw.count,
                            "rtt_raw_same_cpu": results.rttRawSameCPU.count, "rtt_raw_cross_cpu": results.rttRawCrossCPU.count,
                            "throughput": results.throughputAPI.count, "connect": results.connect.count,
                            "suspend_resume": results.suspendResume.count, "kill_to_interruption": results.killToInterruption.count],
                "rtt_64b_us": rounded(rttAPI * 1e6),
                "rtt_64b_raw_us": rounded(rttRaw * 1e6),
                "rtt_64b_raw_same_cpu_us": rounded(rttRawSame * 1e6),
                "rtt_64b_raw_cross_cpu_us": rounded(rttRawCross * 1e6),
                "rtt_64b_vs_raw_same_cpu": rounded(rttAPI / rttRawSame),
                "rtt_64b_vs_raw_cross_cpu": rounded(rttAPI / rttRawCross),
                "throughput_1mib_mib_per_s": rounded(throughputAPI / 1048576),
                "throughput_1mib_raw_mib_per_s": rounded(throughputRaw / 1048576),
                "connect_us": rounded(connect * 1e6),
            ] as [String: Any]
            targets["rtt_64b_vs_raw"] = "<= 1.5"
            targets["throughput_1mib_vs_raw"] = ">= 0.8"
            targets["connect_vs_rtt"] = "<= 3"

            func verdict(_ met: Bool) -> String { met ? "met" : "MISSED" }
            if !table.isEmpty { table.append("") }
            table.append("extension IPC through the host API vs a raw C socketpair, \(rounds) interleaved rounds, median")
            table.append("metric                      host API       reference      ratio  target")
            table.append(row("rtt_64b_vs_raw", String(format: "%8.1f us", rttAPI * 1e6), String(format: "%8.1f us", rttRaw * 1e6),
                             ratios.rtt, "<= 1.5 " + verdict(ratios.rtt <= 1.5)))
            table.append("  64-byte connection.send to the echo extension (standard sandbox) vs 64-byte ping-pong, two C processes")
            table.append(row("  raw pinned to one CPU", "", String(format: "%8.1f us", rttRawSame * 1e6), rttAPI / rttRawSame, ""))
            table.append(row("  raw pinned to two CPUs", "", String(format: "%8.1f us", rttRawCross * 1e6), rttAPI / rttRawCross, ""))
            table.append("  (the unpinned reference is whichever of these the scheduler picked in each run)")
            table.append(row("throughput_1mib_vs_raw", String(format: "%6.0f MiB/s", throughputAPI / 1048576),
                             String(format: "%6.0f MiB/s", throughputRaw / 1048576),
                             ratios.throughput, ">= 0.8 " + verdict(ratios.throughput >= 0.8)))
            table.append("  \(bench.messagesPerSample) x 1 MiB sendOneWay + a request as barrier vs \(bench.messagesPerSample) x (20 B header + 1 MiB) written, read fully in C")
            table.append(row("connect_vs_rtt", String(format: "%8.1f us", connect * 1e6), String(format: "%8.1f us", rttAPI * 1e6),
                             ratios.connect, "<= 3   " + verdict(ratios.connect <= 3)))
            table.append("  makeConnection() to the running extension + first 64-byte reply, in host-API round trips")
            table.append(row("suspend_resume_ms", String(format: "%8.3f ms", suspendResume * 1000), "", nil, "-"))
            table.append("  sandbox.suspend() + resume() of the running extension (SIGSTOP/SIGCONT of its whole sandbox)")
            table.append(row("kill_to_interruption_ms", String(format: "%8.3f ms", killToInterruption * 1000), "", nil, "-"))
            table.append("  kill(sandbox.pid, SIGKILL) of a freshly launched extension to its onInterruption callback")

            if FileManager.default.isExecutableFile(atPath: actorsExtensionPath) {
                let distributed = try await DistributedBench(actorsExtensionPath: actorsExtensionPath, raw: bench, rounds: rounds).run()
                // Against the IPC benchmark's references of this run (see DistributedBench).
                let rtt = median(distributed.rtt), throughput = median(distributed.throughput)
                let coding = median(distributed.coding)
                report["rtt_distributed_vs_raw"] = rounded(rtt / rttRaw)
                report["throughput_distributed_1mib_vs_raw"] = rounded(throughput / throughputRaw)
                report["distributed"] = [
                    "rtt_us": rounded(rtt * 1e6), "rtt_raw_us": rounded(rttRaw * 1e6),
                    "rtt_vs_send": rounded(rtt / rttAPI),
                    "throughput_1mib_mib_per_s": rounded(throughput / 1048576),
                    "throughput_1mib_raw_mib_per_s": rounded(throughputRaw / 1048576),
                    "coding_us": rounded(coding * 1e6), "coding_share_of_rtt": rounded(coding / rtt),
                ] as [String: Any]
                targets["rtt_distributed_vs_raw"] = "<= 1.5"
                targets["throughput_distributed_1mib_vs_raw"] = ">= 0.8"
                table.append(row("rtt_distributed_vs_raw", String(format: "%8.1f us", rtt * 1e6), String(format: "%8.1f us", rttRaw * 1e6),
                                 rtt / rttRaw, "<= 1.5 " + verdict(rtt / rttRaw <= 1.5)))
                table.append(String(format: "  filter.apply(64-byte String) through a @Resolvable proxy (%.2f x connection.send); encoding + decoding %.1f us of it",
                                    rtt / rttAPI, coding * 1e6))
                table.append(row("tp_distributed_1mib_vs_raw", String(format: "%6.0f MiB/s", throughput / 1048576),
                                 String(format: "%6.0f MiB/s", throughputRaw / 1048576), throughput / throughputRaw,
                                 ">= 0.8 " + verdict(throughput / throughputRaw >= 0.8)))
                table.append("  throughput_distributed_1mib_vs_raw: filter.count(1 MiB [UInt8]), four calls in flight")
            }
        }
        if only == nil || only == "discovery" {
            let results = try await DiscoveryBench().run()
            report["discovery_snapshot_ms_1000"] = rounded(results.snapshot * 1000)
            report["discovery_snapshot_cold_ms_1000"] = rounded(results.snapshotCold * 1000)
            report["discovery_update_ms"] = rounded(results.update * 1000)
            if !table.isEmpty { table.append("") }
            table.append("discovery (report only), median")
            table.append(row("discovery_snapshot_ms_1000", String(format: "%8.1f ms", results.snapshot * 1000), "", nil, "-"))
            table.append(String(format: "  Monitor start over 1,000 approved bundles (5 starts; the first, nothing hashed yet: %.1f ms)", results.snapshotCold * 1000))
            table.append(row("discovery_update_ms", String(format: "%8.1f ms", results.update * 1000), "", nil, "-"))
            table.append("  a bundle renamed into place -> the running monitor's update (\(results.updates) installs; includes the 10 ms debounce)")
        }
        if only != "launch" && only != "discovery" && breakdown {
            let bench = IPCBench(extensionPath: extensionPath, pingpongPath: pingpongPath,
                                 securityLevel: policyPath ?? "standard", rounds: rounds)
            let actors = FileManager.default.isExecutableFile(atPath: actorsExtensionPath) ? actorsExtensionPath : nil
            let (lines, details) = try await Breakdown(bench: bench, policy: policy, actorsExtensionPath: actors).run(rounds: max(rounds / 2, 1))
            report["breakdown"] = details
            table.append("")
            table += lines
        }
        report["targets"] = targets
        // The machine may be shared: a busy one moves every number, the references included.
        let loadAfter = loadAverage()
        report["load_average_1m"] = ["before": rounded(loadBefore), "after": rounded(loadAfter)]
        table.append(String(format: "load average (1 min) before %.2f, after %.2f, on %d CPUs", loadBefore, loadAfter,
                            sysconf(Int32(_SC_NPROCESSORS_ONLN))))

        if json {
            let data = try JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(table.joined(separator: "\n"))
        }
    }

    /// `--scale` and/or `--faults`: the table (or JSON) of each, with met/MISSED per target.
    static func runScale(scale: Bool, faults: Bool, json: Bool, bench: ScaleBench, faults runner: ScaleFaults, cycles: Int) async throws {
        // Runs back to back differed more than any change measured: wait out the last one's end.
        let settle = ScaleSystem.waitForQuietCPUs()
        let loadBefore = loadAverage()
        var report: [String: Any] = ["cgroup_limits": Supervisor.shared.hasCgroupLimits,
                                     "machine_settle": ["seconds": rounded(settle.seconds), "cpus_busy_at_start": rounded(settle.busyAtStart)]]
        var targets: [String: String] = [:]
        var table: [String] = []
        if scale {
            let outcome = try await bench.run()
            let scaleReport = ScaleReport(outcome, bench: bench)
            report.merge(scaleReport.json) { $1 }
            targets.merge(scaleReport.targets) { $1 }
            table += scaleReport.lines
        }
        if faults {
            func verdict(_ met: Bool) -> String { met ? "met" : "MISSED" }
            if !table.isEmpty { table.append("") }
            let kill = try runner.hostKill(extensions: 50)
            report["faults_host_kill"] = kill.json
            targets["faults_host_kill_gone_ms"] = "<= 1000, no survivor"
            table.append("faults: host SIGKILLed with 50 extensions running (\(kill.processes) sandboxed processes)")
            table.append(String(format: "  all gone after %@; survivors %d  %@", kill.goneMs.map { String(format: "%.1f ms", $0) } ?? "more than 5 s",
                                kill.survivors.count, verdict(kill.met)))
            let outcome = await runner.cycles(cycles)
            report["faults_cycles"] = outcome.json
            targets["faults_cycles"] = "no growth in fds, threads, children, zombies, cgroups, mounts; anonymous memory <= \(ScaleFaults.memoryGrowthBoundKiB) KiB"
            table.append(String(format: "faults: %d launch/use/invalidate cycles (%d at a time) in %.1f s, %.1f ms per cycle, %d failed",
                                outcome.cycles, outcome.workers, outcome.seconds,
                                outcome.cycles > 0 ? outcome.seconds * 1000 * Double(outcome.workers) / Double(outcome.cycles) : 0, outcome.failed))
            table.append("  growth: " + outcome.growth.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                         + " (anonymous memory bound \(ScaleFaults.memoryGrowthBoundKiB) KiB)  " + verdict(outcome.met))
            for (message, count) in outcome.failures.sorted(by: { $0.value > $1.value }).prefix(5) { table.append("  failure x\(count): \(message)") }
        }
        report["targets"] = targets
        let loadAfter = loadAverage()
        report["load_average_1m"] = ["before": rounded(loadBefore), "after": rounded(loadAfter)]
        table.append(String(format: "load average (1 min) before %.2f, after %.2f, on %d CPUs; MemAvailable %d MiB",
                            loadBefore, loadAfter, sysconf(Int32(_SC_NPROCESSORS_ONLN)), ScaleSystem.memoryAvailable() / 1024))
        table.append(String(format: "waited %.0f s before the run for 3 quiet seconds in a row (CPUs under 10%% busy; %.0f%% busy at first)",
                            settle.seconds, settle.busyAtStart * 100))
        if json {
            let data = try JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(table.joined(separator: "\n"))
        }
    }

    static func row(_ metric: String, _ ours: String, _ reference: String, _ ratio: Double?, _ target: String) -> String {
        metric.padding(toLength: 26, withPad: " ", startingAt: 0) + ours.padding(toLength: 15, withPad: " ", startingAt: 0)
            + reference.padding(toLength: 15, withPad: " ", startingAt: 0)
            + (ratio.map { String(format: "%5.2f", $0) } ?? "    -") + "  " + target
    }

    /// Launches of /bin/true through the runtime, the CLI, bubblewrap and a bare spawn,
    /// interleaved; returns the median seconds of each.
    /// What ``WarmLaunchBench`` measured besides its interleaved samples.
    struct WarmFigures {
        var kibPerSandbox: Double
        var refillRate: Double
        var burst: (median: Double, p90: Double)
    }

    /// bubblewrap's sandbox of `program` in the launch benchmarks: every namespace, /usr read-only.
    static func bwrapArguments(_ bwrap: String, _ program: String) -> [String] {
        [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
         "--proc", "/proc", "--dev", "/dev", program]
    }

    static func launchBench(policy: Policy, cli: String, bwrap: String, iterations: Int) async throws -> ([String: Double], WarmFigures) {
        let truePath = "/bin/true"
        let configuration = SandboxConfiguration(
            executable: truePath, environment: SandboxEnvironment.compose(policy: policy, caller: [:]),
            policy: policy, standardInput: .null, standardOutput: .null, standardError: .null)
        let bwrapArguments = bwrapArguments(bwrap, truePath)

        // Warm up every path once (page cache, policy compilation, lazy initialisation).
        _ = await (try await Supervisor.shared.launch(configuration)).waitForExit()
        _ = spawnAndWait([cli, "exec", "--", truePath])
        _ = spawnAndWait(bwrapArguments)
        let warm = try WarmLaunchBench(configuration: configuration)
        let refillRate = try await warm.fill()
        let kibPerSandbox = try await warm.kibPerSandbox()

        // Interleave the variants so that machine noise hits all of them alike.
        var samples: [String: [Double]] = [:]
        for _ in 0..<iterations {
            var start = now()
            let process = try await Supervisor.shared.launch(configuration)
            let termination = await process.waitForExit()
            samples["launch_api", default: []].append(now() - start)
            guard termination == .exited(code: 0) else { fatalError("sandboxed /bin/true: \(termination)") }

            samples["launch_warm", default: []].append(try await warm.sample())

            start = now()
            guard spawnAndWait([cli, "exec", "--", truePath]) == 0 else { fatalError("extsandbox exec failed") }
            samples["exec_cli", default: []].append(now() - start)

            start = now()
            guard spawnAndWait(bwrapArguments) == 0 else { fatalError("bwrap failed") }
            samples["bwrap", default: []].append(now() - start)

            start = now()
            _ = spawnAndWait([truePath])
            samples["bare_spawn", default: []].append(now() - start)
        }
        let burst = try await warm.burst(200)
        await warm.supervisor.drainPool()
        return (samples.mapValues(median), WarmFigures(kibPerSandbox: kibPerSandbox, refillRate: refillRate, burst: burst))
    }

    /// The 1-minute load average.
    static func loadAverage() -> Double {
        var loads = [Double](repeating: 0, count: 3)
        return getloadavg(&loads, 3) > 0 ? loads[0] : -1
    }

    static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    /// posix_spawn + waitpid with output discarded; returns the exit status.
    static func spawnAndWait(_ argv: [String]) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in [0, 1, 2] { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0) }
        let cArgs = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ) == 0 else { return -1 }
        var status: Int32 = 0
        _ = retryingInterrupts { waitpid(pid, &status, 0) }
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
