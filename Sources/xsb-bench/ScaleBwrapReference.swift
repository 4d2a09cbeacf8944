import Foundation
import Glibc
import SandboxSystem

/// What bubblewrap's sandboxes cost the machine, measured in the same run as ours and the same way
/// (MemAvailable drop ÷ N, minus the sandboxed program's own PSS): the reference that
/// `machine_kib_per_extension` is compared with. The 512 KiB is an absolute figure, and
/// most of a sandbox's cost is what this kernel charges for its namespaces and file systems,
/// whoever makes them (README, performance).
///
/// Each sandbox is `bwrap --unshare-all --die-with-parent` with /usr read-only, /proc, /dev and a
/// /tmp, the launch bench's reference plus a /tmp (ours has one), around a `sleep` that stays until
/// the measurement is done. bubblewrap keeps two processes per sandbox besides the program (its
/// monitor outside and its PID 1 inside) and no memory cgroup; ours has one (the init) and a
/// memory cgroup.
struct BwrapMemoryReference {
    var sandboxes = 0
    var machineKiBPerSandbox = 0.0
    var payloadPSSKiB = 0.0
    /// bubblewrap's own two processes' PSS (its monitor and its PID 1), medians.
    var bwrapPSSKiB = 0.0
    var meminfoKiBPerSandbox: [String: Double] = [:]
    /// What the sandboxes are seen to add, as the scale steps' `accounted`: bubblewrap's own
    /// processes' PSS, page tables, kernel stacks and unreclaimable slab per sandbox (MemAvailable
    /// moves with the page cache and every other program; these much less).
    var accountedKiBPerSandbox: Double {
        bwrapPSSKiB + ["PageTables", "KernelStack", "SUnreclaim"].reduce(0) { $0 + (meminfoKiBPerSandbox[$1] ?? 0) }
    }
    var failure: String?

    var json: [String: Any] {
        var details: [String: Any] = [
            "sandboxes": sandboxes, "machine_kib_per_sandbox": ScaleBench.rounded(machineKiBPerSandbox),
            "payload_pss_kib": ScaleBench.rounded(payloadPSSKiB), "bwrap_processes_pss_kib": ScaleBench.rounded(bwrapPSSKiB),
            "accounted_kib_per_sandbox": ScaleBench.rounded(accountedKiBPerSandbox),
            "meminfo_kib_per_sandbox": meminfoKiBPerSandbox.mapValues(ScaleBench.rounded),
            "command": "bwrap --unshare-all --die-with-parent --ro-bind /usr /usr (+ /bin /lib /lib64 symlinks) --proc /proc --dev /dev --tmpfs /tmp -- sleep",
        ]
        if let failure { details["failure"] = failure }
        return details
    }

    /// Starts `count` bubblewrap sandboxes, measures them once all their programs run, and ends them.
    static func measure(count: Int, bwrap: String, fields: [String]) async -> BwrapMemoryReference {
        var reference = BwrapMemoryReference()
        // A program argument no other process has: `sleep` takes a fraction.
        let token = "86399.\(getpid())"
        let argv = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/usr/bin/sleep", token]
        var baseMeminfo: [String: Int] = [:]
        for field in fields { baseMeminfo[field] = ScaleSystem.meminfo(field) }
        let baseAvailable = ScaleSystem.memoryAvailable(samples: 5)

        var monitors: [pid_t] = []
        defer {
            for pid in monitors { kill(pid, SIGKILL) }
            for pid in monitors {
                var status: Int32 = 0
                _ = retryingInterrupts { waitpid(pid, &status, 0) }
            }
        }
        for _ in 0..<count {
            switch spawnQuietly(argv) {
            case .success(let pid): monitors.append(pid)
            case .failure(let error):
                reference.failure = "\(bwrap): \(error)"
                return reference
            }
        }
        // Every program running (each sandbox built), then memory holding still.
        let deadline = now() + 120
        var programs = payloads(token)
        while programs.count < count && now() < deadline {
            try? await Task.sleep(for: .milliseconds(200))
            programs = payloads(token)
        }
        guard programs.count == count else {
            reference.failure = "only \(programs.count) of \(count) bubblewrap sandboxes started their program within 120 s"
            return reference
        }
        _ = await ScaleBench.waitForSteadyMemory(limit: 30)
        let available = ScaleSystem.memoryAvailable(samples: 5)
        var pss = programs.prefix(100).compactMap { ScaleSystem.proportionalSetSize(of: $0) }.sorted()
        if pss.isEmpty { pss = [0] }
        reference.sandboxes = count
        reference.payloadPSSKiB = Double(pss[pss.count / 2])
        // bubblewrap's PID 1 is each program's parent; its monitor, the process we started.
        func median(_ values: [Int]) -> Double { values.isEmpty ? 0 : Double(values.sorted()[values.count / 2]) }
        let inner = programs.prefix(100).compactMap { ScaleSystem.parent(of: $0) }.compactMap { ScaleSystem.proportionalSetSize(of: $0) }
        let outer = monitors.prefix(100).compactMap { ScaleSystem.proportionalSetSize(of: $0) }
        reference.bwrapPSSKiB = median(inner) + median(outer)
        reference.machineKiBPerSandbox = Double(baseAvailable - available) / Double(count) - reference.payloadPSSKiB
        for field in fields {
            if let before = baseMeminfo[field], let after = ScaleSystem.meminfo(field) {
                reference.meminfoKiBPerSandbox[field] = Double(after - before) / Double(count)
            }
        }
        return reference
    }

    /// The pids of the sandboxed programs: `sleep TOKEN`.
    private static func payloads(_ token: String) -> [pid_t] {
        let wanted = "/usr/bin/sleep\0\(token)\0"
        return (SystemFiles.entries("/proc") ?? []).compactMap { name -> pid_t? in
            guard let pid = pid_t(name), SystemFiles.text("/proc/\(name)/cmdline") == wanted else { return nil }
            return pid
        }
    }

    /// Starts `argv` with /dev/null on 0, 1 and 2.
    private static func spawnQuietly(_ argv: [String]) -> Result<pid_t, BenchError> {
        QuietProcess.start(argv).mapError { BenchError($0.description) }
    }
}
