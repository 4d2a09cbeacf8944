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
/// - launches/s: the median of ``burstRounds`` bursts of ``burstLaunches`` more launches
///   (``concurrency`` at a time), each to its first reply, on top of the N alive (each ended
///   before the next);
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
    /// The extension's arguments: `["extension"]` with `--scale-c-extension`, which runs the
    /// minimal C extension (`xsb-pingpong extension`) in place of the Swift SDK's echo, to tell
    /// the host's share of a figure from the SDK's.
    var extensionArguments: [String] = []
    /// The policy file of the extension point (the shipped `hardened`).
    var policyPath: String
    var steps: [Int] = [10, 100, 1_000, 10_000]
    var bigHostExtensions = 100
    var bigHostHeapBytes = 256 << 20
    var concurrency = 4
    var burstLaunches = 40
    /// Bursts per step; the launch rate is their median.
    var burstRounds = 5
    var singleLaunches = 10
    var minimumRoundTrips = 2_000
    /// MemAvailable (KiB) no step may take the machine below.
    var memoryFloorKiB = 4 << 20
    /// A growth step stops after this many seconds (reported).
    var stepTimeLimit: Double = 1_200
    /// At most this many bubblewrap sandboxes for the memory reference (BwrapMemoryReference), as
    /// many as the largest step below it had alive; 0: none.
    var bwrapReferenceLimit = 1_000
    /// Pre-built sandboxes kept for the launches (`--scale-pool N`; 0: every launch is cold).
    /// Every burst and every "one more launch" then starts from a full pool.
    var poolSize = 0

    /// One running extension: its handle and an open connection (so that it is neither suspended
    /// nor ended while the bench holds it), and the host pids of its sandbox init and program.
    struct Running: Sendable {
        let process: AppExtensionProcess
        let connection: ExtensionConnection
        let initPID: pid_t
        let initStart: UInt64
        let programPID: pid_t?
    }

    /// Failures by message, and the limits they point at.
    struct Failures {
        var count = 0
        var messages: [String: Int] = [:]

        mutating func record(_ error: any Error, during what: String) {
            count += 1
            messages["\(what): \(error)", default: 0] += 1
        }

        /// Another process's failures (a shard host's), by message.
        mutating func merge(_ other: [String: Int], from source: String) {
            for (message, times) in other {
                count += times
                messages["\(source): \(message)", default: 0] += times
            }
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

    private var point: AppExtensionPoint { AppExtensionPoint(name: "xsb-bench.scale", securityLevel: policyPath) }

    // MARK: Launching and ending

    /// Keeps ``poolSize`` pre-built sandboxes of the extensions' shape (every identity of the
    /// bench has the same one). Returns the memory each idle one holds, in KiB.
    func preparePool() async throws -> Double? {
        guard poolSize > 0 else { return nil }
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "xsb-bench.scale.pool", executablePath: extensionPath, point: point, arguments: extensionArguments)
        try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: poolSize)
        let status = Supervisor.shared.poolStatus
        return status.ready > 0 ? Double(status.idleMemoryBytes) / 1024 / Double(status.ready) : nil
    }

    /// Waits (up to 10 s) until the pool is full again, so that a measurement starts from it.
    func awaitFullPool() async {
        guard poolSize > 0 else { return }
        let start = now()
        while Supervisor.shared.poolStatus.ready < poolSize && now() - start < 10 {
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Launches one extension, connects, and checks its answer to a first request.
    func launch(_ name: String) async throws -> Running {
        let identity = AppExtensionIdentity.developmentOnly(bundleIdentifier: name, executablePath: extensionPath, point: point, arguments: extensionArguments)
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
}
