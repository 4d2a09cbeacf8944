import Glibc
import SandboxPolicy
import SandboxSystem

/// What the scale bench and the fault runs read from /proc and /sys: the machine's memory, this
/// host's own resources, a process's state and memory, and what a host may leave behind.
enum ScaleSystem {
    /// A field of /proc/meminfo in KiB (`MemAvailable`, `PageTables`, `SUnreclaim`, …).
    static func meminfo(_ field: String) -> Int? {
        guard let text = SystemFiles.text("/proc/meminfo") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.dropFirst(field.count + 1).split(separator: " ").first ?? "")
        }
        return nil
    }

    /// MemAvailable in KiB: the median of `samples` reads 20 ms apart, since the machine is shared
    /// and other programs' memory moves while we measure.
    static func memoryAvailable(samples: Int = 1) -> Int {
        var values: [Int] = []
        for index in 0..<max(samples, 1) {
            if index > 0 { usleep(20_000) }
            values.append(meminfo("MemAvailable") ?? 0)
        }
        values.sort()
        return values[values.count / 2]
    }

    /// A `Key: value kB` field of /proc/PID/status (`Threads`, `RssAnon`, `VmPTE`, …).
    static func status(_ field: String, of pid: String = "self") -> Int? {
        guard let text = SystemFiles.text("/proc/\(pid)/status") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.dropFirst(field.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "")
        }
        return nil
    }

    /// Proportional set size of a process in KiB (/proc/PID/smaps_rollup), nil once it is gone.
    static func proportionalSetSize(of pid: pid_t) -> Int? {
        guard let text = SystemFiles.text("/proc/\(pid)/smaps_rollup") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("Pss:") {
            return Int(line.dropFirst(4).split(separator: " ").first ?? "")
        }
        return nil
    }

    /// This process's open file descriptors.
    static func openFileDescriptors() -> Int {
        (SystemFiles.entries("/proc/self/fd") ?? []).count
    }

    /// Lines of a /proc file of this process (`maps`, `mountinfo`).
    static func lineCount(_ file: String) -> Int {
        guard let text = SystemFiles.text("/proc/self/\(file)", limit: 64 << 20) else { return -1 }
        return text.split(separator: "\n").count
    }

    /// The one-letter state of a process ("R", "S", "Z", …) and its start time in clock ticks
    /// since boot (which tells a reused pid from the original), nil when it is gone.
    static func processState(_ pid: pid_t) -> (state: String, startTime: UInt64)? {
        guard let stat = SystemFiles.text("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
        guard fields.count > 19, let start = UInt64(fields[19]) else { return nil }
        return (String(fields[0]), start)
    }

    /// A process's parent (`PPid` of /proc/PID/stat), nil when it is gone.
    static func parent(of pid: pid_t) -> pid_t? {
        guard let stat = SystemFiles.text("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
        return fields.count > 1 ? pid_t(fields[1]) : nil
    }

    /// Direct children of this process (every thread's) that are zombies: ended, never reaped.
    static func zombieChildren() -> [pid_t] {
        var children: [pid_t] = []
        for task in SystemFiles.entries("/proc/self/task") ?? [] {
            let text = SystemFiles.text("/proc/self/task/\(task)/children") ?? ""
            children += text.split(separator: " ").compactMap { pid_t($0) }
        }
        return children.filter { processState($0)?.state == "Z" }
    }

    /// Cgroup directories named after `host` (the runtime's `extsandbox-PID-N`) under this
    /// process's own memory and pids cgroups (v1) or its unified cgroup (v2).
    static func cgroupDirectories(of host: pid_t = getpid()) -> [String] {
        guard let membership = SystemFiles.text("/proc/self/cgroup") else { return [] }
        var parents: Set<String> = []
        for line in membership.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            if fields[1].isEmpty { parents.insert("/sys/fs/cgroup" + fields[2]) }
            for controller in fields[1].split(separator: ",") where controller == "memory" || controller == "pids" {
                parents.insert("/sys/fs/cgroup/\(controller)" + fields[2])
            }
        }
        return parents.sorted().flatMap { parent in
            (SystemFiles.entries(parent) ?? []).filter { $0.hasPrefix("extsandbox-\(host)-") }.map { "\(parent)/\($0)" }
        }
    }

    /// The kernel memory one new, empty memory cgroup costs on this boot, in KiB: the median of
    /// three rounds of `probes` cgroups made (and removed) beside the sandboxes' (slab objects and
    /// per-CPU memory, which is where a memory cgroup's own tables go). Most of it is the
    /// cgroup's shrinker table: 1 KiB per 64 of the most memory-cgroup-aware shrinkers (one per
    /// mounted file system) this boot has ever had registered at once, a size that never shrinks.
    /// So a machine that once ran 10,000 sandboxes (about 4 file systems each) pays 0.7 MiB for
    /// every memory cgroup made afterwards, ours and everybody else's, until it reboots. Nil
    /// where this process may not make memory cgroups.
    static func emptyMemoryCgroupKiB(probes: Int = 32) -> Double? {
        guard let membership = SystemFiles.text("/proc/self/cgroup") else { return nil }
        var parent: String?
        for line in membership.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            if fields[1].split(separator: ",").contains("memory") { parent = "/sys/fs/cgroup/memory" + fields[2] }
            // v2: only where the own cgroup hands `memory` to its children.
            if fields[1].isEmpty && parent == nil {
                let dir = "/sys/fs/cgroup" + fields[2]
                if SystemFiles.text(dir + "/cgroup.subtree_control")?.contains("memory") == true { parent = dir }
            }
        }
        guard let parent else { return nil }
        // Objects, not pages: after a big run's teardown the slabs have room enough that new
        // objects often need no new page, and SUnreclaim would not move.
        func kernelKiB() -> Int { slabObjectsKiB() + (meminfo("Percpu") ?? 0) }
        var rounds: [Double] = []
        for _ in 0..<3 {
            // Named like the runtime's cgroups (extsandbox-PID-N), so a supervisor sweeps them
            // should this process die before it removes them.
            let names = (0..<probes).map { "\(parent)/extsandbox-\(getpid())-\(900_000_000 + $0)" }
            let before = kernelKiB()
            let made = names.prefix { mkdir($0, 0o755) == 0 }.count
            let after = kernelKiB()
            for name in names.prefix(made) { rmdir(name) }
            guard made == probes else { return nil }
            rounds.append(Double(after - before) / Double(probes))
        }
        return rounds.sorted()[1]
    }

    /// Waits (up to `limit` seconds) until the CPUs were busy less than `quiet` of the time in each
    /// of 3 seconds in a row (`/proc/stat`, kernel threads included): a run that starts while the
    /// kernel still tears down a previous run's sandboxes (RCU frees, memory cgroups going offline
    /// in kworkers) measures that too. Returns the seconds waited and how busy the first second was.
    static func waitForQuietCPUs(quiet: Double = 0.1, limit: Double = 120) -> (seconds: Double, busyAtStart: Double) {
        func sample() -> (busy: Double, total: Double)? {
            guard let line = SystemFiles.text("/proc/stat")?.split(separator: "\n").first else { return nil }
            let ticks = line.split(separator: " ").dropFirst().prefix(8).compactMap { Double($0) }
            guard ticks.count == 8 else { return nil }
            let total = ticks.reduce(0, +)
            return (total - ticks[3] - ticks[4], total)  // idle and iowait are not busy
        }
        var start = timespec(), clock = timespec()
        clock_gettime(CLOCK_MONOTONIC, &start)
        func elapsed() -> Double {
            clock_gettime(CLOCK_MONOTONIC, &clock)
            return Double(clock.tv_sec - start.tv_sec) + Double(clock.tv_nsec - start.tv_nsec) / 1e9
        }
        guard var last = sample() else { return (0, 0) }
        var busyAtStart: Double?
        var quietSeconds = 0
        while quietSeconds < 3 && elapsed() < limit {
            sleep(1)
            guard let now = sample() else { break }
            let busy = now.total > last.total ? (now.busy - last.busy) / (now.total - last.total) : 0
            if busyAtStart == nil { busyAtStart = busy }
            quietSeconds = busy < quiet ? quietSeconds + 1 : 0
            last = now
        }
        return (elapsed(), busyAtStart ?? 0)
    }

    /// KiB in slab objects in use, every cache (`/proc/slabinfo`: active objects times their size).
    static func slabObjectsKiB() -> Int {
        guard let text = SystemFiles.text("/proc/slabinfo") else { return 0 }
        var bytes = 0
        for line in text.split(separator: "\n").dropFirst(2) {
            let fields = line.split(separator: " ", maxSplits: 4)
            guard fields.count >= 4, let active = Int(fields[1]), let size = Int(fields[3]) else { continue }
            bytes += active * size
        }
        return bytes >> 10
    }

    /// The names of this process's threads, sorted (which kind of thread came or went).
    static func threadNames() -> [String] {
        (SystemFiles.entries("/proc/self/task") ?? []).compactMap { task in
            SystemFiles.text("/proc/self/task/\(task)/comm")?.split(separator: "\n").first.map(String.init)
        }.sorted()
    }

    /// The host's resources at one moment.
    struct HostSample {
        var fileDescriptors: Int
        var threads: Int
        /// Anonymous resident memory (the heap, stacks) in KiB.
        var anonymousKiB: Int
        var memoryMaps: Int
        var mounts: Int
        var zombies: Int
        var cgroups: Int

        static func now() -> HostSample {
            HostSample(fileDescriptors: openFileDescriptors(), threads: status("Threads") ?? -1,
                       anonymousKiB: status("RssAnon") ?? -1, memoryMaps: lineCount("maps"),
                       mounts: lineCount("mountinfo"), zombies: zombieChildren().count, cgroups: cgroupDirectories().count)
        }
    }
}

/// The limits a host of thousands of extensions runs into, raised where this process may raise
/// them, and put back as they were by ``restore()``.
///
/// Per process: RLIMIT_NOFILE and RLIMIT_NPROC (soft to hard; as root the hard NOFILE limit too,
/// up to fs.nr_open). Machine-wide, as root, only what the next step's number of extensions
/// needs, from what the previous step measured: the namespace counts of /proc/sys/user,
/// kernel.pid_max, kernel.threads-max, vm.max_map_count.
final class ScaleLimits {
    struct Change {
        var name: String
        var before: String
        var after: String
    }

    private(set) var changes: [Change] = []
    /// Limits this process was not allowed to raise, with the reason (reported once).
    private(set) var refused: [String] = []
    private var restoreActions: [() -> Void] = []

    /// Raises the per-process limits (soft to hard), and as root the machine-wide ones that
    /// `extensions` running extensions would exceed: each has `tasksPerExtension` tasks (the
    /// init, the program and its threads: pids), one namespace of each kind, and costs the host
    /// `mapsPerExtension` memory maps.
    func raise(extensions: Int, tasksPerExtension: Double, mapsPerExtension: Double) {
        raiseResource(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), name: "RLIMIT_NOFILE",
                      rootHard: Int(SystemFiles.text("/proc/sys/fs/nr_open")?.split(separator: "\n").first ?? "") ?? 1 << 20)
        raiseResource(__rlimit_resource_t(__RLIMIT_NPROC.rawValue), name: "RLIMIT_NPROC", rootHard: nil)
        guard geteuid() == 0, extensions > 0 else { return }
        // The namespaces already in use are not counted anywhere we can read: keep a wide margin.
        for kind in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
            raiseSysctl("/proc/sys/user/max_\(kind)_namespaces", toAtLeast: extensions + 10_000)
        }
        // Tasks on the machine now (the 4th field of /proc/loadavg: running/total) plus ours.
        let loadavg = SystemFiles.text("/proc/loadavg")?.split(separator: " ") ?? []
        let tasksNow = loadavg.count > 3 ? Int(loadavg[3].split(separator: "/").last ?? "") ?? 0 : 0
        let tasks = tasksNow + Int((Double(extensions) * tasksPerExtension).rounded(.up)) + 4_096
        raiseSysctl("/proc/sys/kernel/pid_max", toAtLeast: min(tasks, 4_194_304))
        raiseSysctl("/proc/sys/kernel/threads-max", toAtLeast: tasks)
        let maps = ScaleSystem.lineCount("maps") + Int((Double(extensions) * mapsPerExtension).rounded(.up)) + 1_024
        raiseSysctl("/proc/sys/vm/max_map_count", toAtLeast: maps)
    }

    private func raiseResource(_ resource: __rlimit_resource_t, name: String, rootHard: Int?) {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return }
        let before = limit
        if geteuid() == 0, let rootHard, limit.rlim_max != rlim_t.max, Int(limit.rlim_max) < rootHard {
            limit.rlim_max = rlim_t(rootHard)
        }
        func text(_ value: rlimit) -> String {
            func one(_ v: rlim_t) -> String { v == rlim_t.max ? "unlimited" : "\(v)" }
            return "\(one(value.rlim_cur))/\(one(value.rlim_max))"
        }
        // Raising the hard limit needs CAP_SYS_RESOURCE, which a container may withhold even from
        // root: then the soft limit still goes up to the hard one, and the refusal is reported.
        if limit.rlim_max != before.rlim_max {
            var wanted = limit
            wanted.rlim_cur = wanted.rlim_max
            if setrlimit(resource, &wanted) == 0 {
                changes.append(Change(name: name, before: text(before), after: text(wanted)))
                restoreActions.append { var old = before; _ = setrlimit(resource, &old) }
                return
            }
            refused.append("\(name) hard limit \(text(before)) -> \(wanted.rlim_max): \(String(cString: strerror(errno))) (no CAP_SYS_RESOURCE?)")
            limit.rlim_max = before.rlim_max
        }
        limit.rlim_cur = limit.rlim_max
        guard limit.rlim_cur != before.rlim_cur else { return }
        guard setrlimit(resource, &limit) == 0 else {
            refused.append("\(name) soft limit \(text(before)) -> \(limit.rlim_cur): \(String(cString: strerror(errno)))")
            return
        }
        changes.append(Change(name: name, before: text(before), after: text(limit)))
        restoreActions.append { var old = before; _ = setrlimit(resource, &old) }
    }

    private func raiseSysctl(_ path: String, toAtLeast wanted: Int) {
        guard let text = SystemFiles.text(path), let current = Int(text.split(separator: "\n").first ?? "") else { return }
        guard current < wanted else { return }
        guard Self.write(path, "\(wanted)") else {
            refused.append("\(path) \(current) -> \(wanted): \(String(cString: strerror(errno)))")
            return
        }
        let name = path.dropFirst("/proc/sys/".count).split(separator: "/").joined(separator: ".")
        changes.append(Change(name: name, before: "\(current)", after: "\(wanted)"))
        restoreActions.append { _ = Self.write(path, "\(current)") }
        Self.journal("\(path) \(current)")
    }

    /// The machine-wide values as they were, one "path value" line per change, appended to the
    /// file `$XSB_BENCH_SYSCTL_JOURNAL` names (scripts/bench's): a bench killed before its
    /// ``restore()`` leaves them raised, and the script puts them back from there. Emptied by
    /// ``restore()``.
    private static func journal(_ line: String?) {
        guard let path = getenv("XSB_BENCH_SYSCTL_JOURNAL").map({ String(cString: $0) }), !path.isEmpty else { return }
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (line == nil ? O_TRUNC : O_APPEND), 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        if let line { _ = (line + "\n").withCString { Glibc.write(fd, $0, strlen($0)) } }
    }

    private static func write(_ path: String, _ value: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return value.withCString { Glibc.write(fd, $0, strlen($0)) } == strlen(value)
    }

    /// Puts every changed limit back, the last change first.
    func restore() {
        for action in restoreActions.reversed() { action() }
        restoreActions = []
        Self.journal(nil)
    }

    /// The limits as one line each.
    var descriptions: [String] { changes.map { "\($0.name) \($0.before) -> \($0.after)" } }
}
