import ExtSandbox
import Foundation
import Glibc
import Synchronization

/// Steps one host process cannot hold under its RLIMIT_NOFILE.
///
/// A host holds 2 fds per running extension and 1 per open connection, and the bench keeps a
/// connection open to each extension, so a host whose fd limit cannot be raised (a container
/// that withholds CAP_SYS_RESOURCE: 20,000 here) holds a few thousand. A step above that spreads
/// its extensions over more host processes: this executable re-executed as a shard host
/// (`xsb-bench --scale-shard-host N`), which launches its share over the same public host API,
/// makes each answer a request, reports its own figures, answers round trips when asked, and
/// ends its extensions when told to (or when the bench's process goes: PR_SET_PDEATHSIG).
///
/// The protocol is one JSON object per line on the shard's stdout, commands one per line on its
/// stdin: after start-up the shard grows and prints `{"event":"grown",…}`; `rtt K` makes it send K
/// 64-byte requests round-robin over its extensions and print `{"event":"rtt",…}` with every
/// sample; `end` (or end of input) ends its extensions, waits for their sandboxes and cgroups
/// to go, prints `{"event":"ended",…}` and exits.
extension ScaleBench {
    /// The shard host's side: grows to `count` extensions (names from `firstIndex` on, so no two
    /// hosts share one), stopping early above `floorKiB` of MemAvailable, then serves commands.
    func shardHost(count: Int, firstIndex: Int, floorKiB: Int) async -> Never {
        // The bench's process may die without ending us: then we go, and our sandboxes with us.
        // (Not PR_SET_PDEATHSIG: it fires when the parent *thread* exits, and the thread that
        // started us is a pool thread that may. A task, not a thread: host threads are measured.)
        let parent = getppid()
        Task.detached {
            while getppid() == parent { try? await Task.sleep(for: .milliseconds(200)) }
            _exit(1)
        }
        let limits = ScaleLimits()
        limits.raise(extensions: 0, tasksPerExtension: 0, mapsPerExtension: 0)
        var failures = Failures()
        do {
            await Self.end([try await launch("xsb-bench.scale.shard-warmup.\(firstIndex)")])
        } catch {
            failures.record(error, during: "shard warm-up launch")
        }
        try? await Task.sleep(for: .milliseconds(500))
        let base = ScaleSystem.HostSample.now()
        var alive: [Running] = []
        var nextIndex = firstIndex
        let grown = await grow(&alive, to: count, nextIndex: &nextIndex, failures: &failures, heap: nil,
                               phaseStart: (ScaleSystem.memoryAvailable(), 0), floorKiB: floorKiB, project: false)
        try? await Task.sleep(for: .seconds(1))
        let host = ScaleSystem.HostSample.now()
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let sampleStride = max(alive.count / 50, 1)
        let samplePIDs: [[Int]] = stride(from: 0, to: alive.count, by: sampleStride).compactMap { index in
            alive[index].programPID.map { [Int(alive[index].initPID), Int($0)] }
        }
        Self.emit([
            "event": "grown", "pid": Int(getpid()), "extensions": alive.count, "stopped": grown.stopped ?? NSNull(),
            "grow_seconds": Self.rounded(grown.seconds), "failures": failures.messages, "fd_limit": Int(limit.rlim_cur),
            "host_fds": host.fileDescriptors, "host_fds_base": base.fileDescriptors,
            "host_anon_kib": host.anonymousKiB, "host_anon_kib_base": base.anonymousKiB,
            "host_threads": host.threads, "host_maps": host.memoryMaps, "host_maps_base": base.memoryMaps,
            "sample_pids": samplePIDs,
        ])

        let message = ExtensionMessage([UInt8](repeating: UInt8(ascii: "x"), count: 64))
        let commands = LineReader(fd: 0)
        while let command = await commands.next() {
            let words = command.split(separator: " ")
            guard words.first == "rtt", words.count == 2, let requests = Int(words[1]), !alive.isEmpty else { break }
            var samples: [Int] = []
            var answered = Set<Int>()
            var rttFailures = Failures()
            for request in 0..<requests {
                let index = request % alive.count
                let start = now()
                do {
                    let reply = try await alive[index].connection.send(message)
                    samples.append(Int(((now() - start) * 1e7).rounded()))
                    if reply.payload == message.payload { answered.insert(index) }
                    else { rttFailures.record(BenchError("answered \(reply.payload.count) bytes"), during: "request") }
                } catch {
                    rttFailures.record(error, during: "request")
                }
            }
            // Tenths of a microsecond, as integers: a short line for thousands of samples.
            Self.emit(["event": "rtt", "samples_100ns": samples, "answered": answered.count, "failures": rttFailures.messages])
        }
        let notEnded = await Self.end(alive)
        alive = []
        await settle(base: base)
        let after = ScaleSystem.HostSample.now()
        limits.restore()
        Self.emit([
            "event": "ended", "not_ended": notEnded,
            "left_behind": ["fds": after.fileDescriptors - base.fileDescriptors, "cgroups": after.cgroups,
                            "zombies": after.zombies, "mounts": after.mounts - base.mounts],
        ])
        exit(0)
    }

    static func emit(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        // Unbuffered: the bench reads each line as it comes.
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }
}

/// The bench's side of one shard host: the process, a pipe to its stdin and one from its stdout.
final class ShardHost: Sendable {
    let pid: pid_t
    let requested: Int
    /// The bench's end of the socket pair that is the shard's stdin and stdout.
    private let socket: Int32
    private let lines: LineReader

    /// Starts this executable as a shard host of `count` extensions.
    init(count: Int, firstIndex: Int, floorKiB: Int, bench: ScaleBench) throws {
        // One socket pair: the shard's end is its stdin and stdout (close-on-exec until dup2).
        var fds: (Int32, Int32) = (-1, -1)
        let made = withUnsafeMutableBytes(of: &fds) {
            socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, $0.baseAddress!.assumingMemoryBound(to: Int32.self))
        }
        guard made == 0 else { throw BenchError("socketpair for a shard host: \(String(cString: strerror(errno)))") }
        let own = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let argv = [own, "--scale-shard-host", "\(count)", "--scale-shard-first", "\(firstIndex)",
                    "--scale-shard-floor-kib", "\(floorKiB)", "--extension", bench.extensionPath, "--scale-policy", bench.policyPath]
            + (bench.extensionArguments == ["extension"] ? ["--scale-c-extension", "--pingpong", bench.extensionPath] : [])
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds.1, 0)
        posix_spawn_file_actions_adddup2(&actions, fds.1, 1)
        var cArgs = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArgs { free(pointer) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, own, &actions, nil, &cArgs, environ)
        close(fds.1)
        guard rc == 0 else {
            close(fds.0)
            throw BenchError("posix_spawn of the shard host \(own): \(String(cString: strerror(rc)))")
        }
        pid = child
        requested = count
        socket = fds.0
        lines = LineReader(fd: fds.0)
    }

    /// The next line the shard prints, nil when it closed its stdout (it died).
    func nextLine() async -> String? { await lines.next() }

    /// A line of the shard's as the JSON object of `event`, or an error naming what came instead.
    func parse(_ line: String?, _ event: String) throws -> [String: Any] {
        guard let line, let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
              object["event"] as? String == event else {
            throw BenchError("shard host \(pid) did not report \(event): \(line ?? "its output closed")")
        }
        return object
    }

    /// Sends one command line (a few bytes: the socket's buffer takes it whole).
    func send(_ command: String) {
        _ = (command + "\n").withCString { write(socket, $0, strlen($0)) }
    }

    /// Tells the shard to end its extensions, reads its report and reaps it.
    func end() async -> Ended {
        send("end")
        let report = await nextLine()
        // It exits right after its report (or has died): reap it without blocking a pool thread.
        var status: Int32 = 0
        let deadline = now() + 60
        while true {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid || (reaped < 0 && errno != EINTR) { break }
            // A shard that does not exit is killed (and then counted as failed: its status).
            if now() > deadline { kill(pid, SIGKILL) }
            try? await Task.sleep(for: .milliseconds(10))
        }
        close(socket)
        return Ended(pid: pid, report: report, status: status)
    }

    /// A shard host's end: its `ended` line (nil if it died first) and its wait status.
    struct Ended: Sendable {
        var pid: pid_t
        var report: String?
        var status: Int32
    }

}

/// Lines from a non-blocking file descriptor, polled from the calling task: no thread of its own,
/// so that the hosts' thread counts stay the library's.
final class LineReader: Sendable {
    let fd: Int32
    private let pending = Mutex<[UInt8]>([])

    /// Makes `fd` non-blocking (its open file description: each end of a socket pair has its own).
    init(fd: Int32) {
        self.fd = fd
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
    }

    /// The next line without its newline, nil at end of input.
    func next() async -> String? {
        while true {
            switch pending.withLock({ Self.take(&$0, from: fd) }) {
            case .line(let line): return line
            case .end: return nil
            case .wait: try? await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    private enum Read { case line(String), end, wait }

    /// A line from what was read before, else one read (into a small stack buffer: an empty
    /// poll allocates nothing, so that polling does not move the host's memory figures).
    private static func take(_ pending: inout [UInt8], from fd: Int32) -> Read {
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                return .line(line)
            }
            let outcome: Read? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1024) { chunk in
                let count = read(fd, chunk.baseAddress, chunk.count)
                if count < 0 && errno == EINTR { return nil }
                if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .wait }
                guard count > 0 else { return .end }
                pending += chunk[..<count]
                return nil
            }
            if let outcome { return outcome }
        }
    }
}

/// A shard host that grew, with what it reported.
struct ShardRecord {
    let host: ShardHost
    let grown: [String: Any]

    init(host: ShardHost, grown: [String: Any]) {
        self.host = host
        self.grown = grown
    }

    var extensions: Int { grown["extensions"] as? Int ?? 0 }
    var stopped: String? { grown["stopped"] as? String }
    var failures: [String: Int] { grown["failures"] as? [String: Int] ?? [:] }
    /// Sandbox init and program pids of up to 50 of its extensions.
    var samplePIDs: [(initPID: pid_t, programPID: pid_t)] {
        (grown["sample_pids"] as? [[Int]] ?? []).compactMap { $0.count == 2 ? (pid_t($0[0]), pid_t($0[1])) : nil }
    }

    /// Its own figures, per host like the bench process's.
    var figures: ScaleBench.HostFigures {
        func int(_ key: String) -> Int { grown[key] as? Int ?? 0 }
        let count = extensions
        let perExtension = { (value: Int) in count > 0 ? Double(value) / Double(count) : 0 }
        return ScaleBench.HostFigures(
            pid: host.pid, role: "shard", extensions: count, fdLimit: int("fd_limit"), fds: int("host_fds"),
            fdsPerExtension: perExtension(int("host_fds") - int("host_fds_base") - count),
            fdsPerExtensionWithConnection: perExtension(int("host_fds") - int("host_fds_base")),
            kibPerExtension: perExtension(int("host_anon_kib") - int("host_anon_kib_base")), threads: int("host_threads"),
            growSeconds: grown["grow_seconds"] as? Double ?? 0, stopped: stopped)
    }

    /// What the shard hosts left: the sandboxes they did not end, what each saw left in itself,
    /// cgroups named after them still there (checked here, after they exited), and any that
    /// did not end cleanly.
    static func leftBehind(_ ends: [ShardHost.Ended]) -> [String: Int] {
        var result = ["shard_hosts_failed": 0, "shard_sandboxes_not_ended": 0, "shard_cgroups": 0,
                      "shard_fds": 0, "shard_zombies": 0, "shard_mounts": 0]
        for end in ends {
            let report = end.report.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            if report?["event"] as? String != "ended" || end.status != 0 { result["shard_hosts_failed", default: 0] += 1 }
            result["shard_sandboxes_not_ended", default: 0] += report?["not_ended"] as? Int ?? 0
            let left = report?["left_behind"] as? [String: Int] ?? [:]
            for key in ["fds", "zombies", "mounts"] { result["shard_\(key)", default: 0] += left[key] ?? 0 }
            result["shard_cgroups", default: 0] += max(left["cgroups"] ?? 0, ScaleSystem.cgroupDirectories(of: end.pid).count)
        }
        return result
    }
}

extension ScaleBench {
    /// One host process's own figures at a step.
    struct HostFigures {
        var pid: pid_t
        var role: String
        var extensions: Int
        var fdLimit: Int
        var fds: Int
        var fdsPerExtension: Double
        var fdsPerExtensionWithConnection: Double
        var kibPerExtension: Double
        var threads: Int
        var growSeconds: Double
        var stopped: String?

        var json: [String: Any] {
            var result: [String: Any] = [
                "pid": Int(pid), "role": role, "extensions": extensions, "fd_limit": fdLimit, "host_fds": fds,
                "host_fds_per_extension": ScaleBench.rounded(fdsPerExtension),
                "host_fds_per_extension_with_connection": ScaleBench.rounded(fdsPerExtensionWithConnection),
                "host_kib_per_extension": ScaleBench.rounded(kibPerExtension), "host_threads": threads,
                "grow_seconds": ScaleBench.rounded(growSeconds),
            ]
            if let stopped { result["stopped"] = stopped }
            return result
        }
    }

    /// How a step's extensions are spread over host processes: this one holds what its fd table
    /// can (its own fds, a reserve for the launches measured on top, and `fdsPerExtension` per
    /// extension, the connection kept open to each counted); the rest go to new shard hosts of
    /// equal share.
    struct HostPlan {
        var hereTarget: Int
        var newShards: [Int] = []
        var reason: String?

        init(target: Int, held: Int, aliveHere: Int, shardHosts: Int, baseFDs: Int, fdsPerExtension measured: Double?, bench: ScaleBench) {
            var limit = rlimit()
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
            let fdLimit = limit.rlim_cur == rlim_t.max ? Int.max / 2 : Int(limit.rlim_cur)
            // (A measured 3.02 is 3 and a little noise, not 4.)
            let perExtension = max(Int(((measured ?? 3) - 0.1).rounded(.up)), 3)
            // The single and burst launches of a step, each a few fds while it starts and 3 once
            // it answers, until they are ended again.
            let reserve = 128 + (bench.burstLaunches + bench.concurrency) * 8
            let capacity = max((fdLimit - baseFDs - reserve) / perExtension, 1)
            let remaining = target - (held - aliveHere)
            guard remaining > capacity else {
                hereTarget = max(remaining, aliveHere)
                return
            }
            let hosts = (remaining + capacity - 1) / capacity
            hereTarget = min(max(aliveHere, remaining / hosts), capacity)
            var rest = remaining - hereTarget
            for index in 0..<(hosts - 1) {
                let share = rest / (hosts - 1 - index)
                newShards.append(share)
                rest -= share
            }
            reason = "RLIMIT_NOFILE \(fdLimit) (soft; hard \(limit.rlim_max == rlim_t.max ? "unlimited" : "\(limit.rlim_max)")) "
                + "holds about \(capacity) extensions in one host at \(perExtension) fds each (2 + the connection kept open), "
                + "after its own \(baseFDs) fds and \(reserve) kept for the launches measured on top: "
                + "\(target) need \(shardHosts + hosts) host processes"
        }
    }
}
