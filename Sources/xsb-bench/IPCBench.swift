import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime
import SandboxSystem
import Synchronization

/// The host API's IPC and lifecycle, against a raw C reference measured in the same run:
///
/// - `rtt`: a 64-byte request/reply through ``ExtensionConnection/send(_:)`` to the echo
///   extension in a real sandbox, against a 64-byte ping-pong over a socketpair between two C
///   processes (`xsb-pingpong rtt`). The reference is bimodal: about 10 µs when the scheduler
///   keeps both processes on one CPU, about 40 µs when it puts them on two (this VM), decided
///   per run. So the same ping-pong pinned to one CPU and to two is measured too, to bracket it.
/// - `throughput`: 1 MiB one-way messages (``ExtensionConnection/sendOneWayWaitingForRoom(_:)``, then one
///   request as a barrier), against the same number of 20-byte headers + 1 MiB written over a
///   socketpair and read fully by a C process (`xsb-pingpong throughput`).
/// - `connect`: ``AppExtensionProcess/makeConnection()`` to the running extension plus its first
///   64-byte reply, in units of the host API's 64-byte round trip.
/// - `suspend_resume`: ``SandboxedProcess/suspend()`` + ``SandboxedProcess/resume()`` of the
///   running extension.
/// - `kill_to_interruption`: `kill(pid, SIGKILL)` of a fresh extension's sandbox to its
///   ``AppExtensionProcess/Configuration/onInterruption``.
///
/// Everything runs in `rounds` interleaved rounds, so that machine noise hits every variant
/// alike. The benchmark's own code runs off the main actor (on the global executor), as a host's
/// background work would.
struct IPCBench: Sendable {
    var extensionPath: String
    var pingpongPath: String
    /// A policy name or file for the extension point.
    var securityLevel: String
    var rounds: Int
    /// Round trips per round, for the API and for the raw reference each (and half as many for
    /// each pinned reference).
    var roundTripsPerRound = 1000
    /// 1 MiB messages per throughput sample.
    var messagesPerSample = 128
    /// New connections per round.
    var connectsPerRound = 10
    /// Suspend+resume cycles per round.
    var suspendsPerRound = 4

    static let messageSize = 64
    static let bulkSize = 1 << 20
    /// The wire protocol's length prefix and header, counted in both throughputs.
    static let headerSize = 20

    struct Results: Sendable {
        var rttAPI: [Double] = []
        var rttRaw: [Double] = []
        /// The raw reference with both processes pinned to one CPU, and to two different CPUs.
        var rttRawSameCPU: [Double] = []
        var rttRawCrossCPU: [Double] = []
        /// Bytes per second.
        var throughputAPI: [Double] = []
        var throughputRaw: [Double] = []
        var connect: [Double] = []
        var suspendResume: [Double] = []
        var killToInterruption: [Double] = []
    }

    nonisolated func run() async throws -> Results {
        try await withEchoConnection { process, connection, small in
            let point = AppExtensionPoint(name: "xsb-bench.ipc", securityLevel: securityLevel)
            let bulk = ExtensionMessage([UInt8](repeating: UInt8(ascii: "y"), count: Self.bulkSize))
            let barrier = ExtensionMessage(Array("barrier".utf8))

            // Warm up every path once (page cache, lazy initialisation, the extension's threads).
            for _ in 0..<200 { try await roundTrip(connection, small) }
            _ = try await throughputAPI(connection, bulk: bulk, barrier: barrier)
            _ = try rawRoundTrips(count: 50)
            _ = try rawThroughput()
            for _ in 0..<3 { _ = try await connectOnce(process, small) }
            try await process.sandbox.suspend()
            try await process.sandbox.resume()
            _ = try await killToInterruption(point: point)

            var results = Results()
            for _ in 0..<rounds {
                results.rttRaw += try rawRoundTrips(count: roundTripsPerRound)
                for _ in 0..<roundTripsPerRound {
                    let start = now()
                    try await roundTrip(connection, small)
                    results.rttAPI.append(now() - start)
                }
                results.rttRawSameCPU += try rawRoundTrips(count: roundTripsPerRound / 2, placement: "same")
                results.rttRawCrossCPU += try rawRoundTrips(count: roundTripsPerRound / 2, placement: "cross")

                results.throughputRaw.append(try rawThroughput())
                results.throughputAPI.append(try await throughputAPI(connection, bulk: bulk, barrier: barrier))

                for _ in 0..<connectsPerRound {
                    results.connect.append(try await connectOnce(process, small))
                    // A few round trips on the first connection: the extension finishes with the
                    // connection just closed, and the CPUs stay as warm as for the round trips.
                    for _ in 0..<5 { try await roundTrip(connection, small) }
                }

                for _ in 0..<suspendsPerRound {
                    let start = now()
                    try await process.sandbox.suspend()
                    try await process.sandbox.resume()
                    results.suspendResume.append(now() - start)
                }
                // The extension still answers after its cycles.
                try await roundTrip(connection, small)

                results.killToInterruption.append(try await killToInterruption(point: point))
            }
            return results
        }
    }

    /// Only connects (each with its first reply), for profiling.
    nonisolated func connectsOnly(count: Int) async throws -> [Double] {
        try await withEchoConnection { process, connection, small in
            for _ in 0..<200 { try await roundTrip(connection, small) }
            var samples: [Double] = []
            for _ in 0..<count {
                samples.append(try await connectOnce(process, small))
                for _ in 0..<5 { try await roundTrip(connection, small) }
            }
            return samples
        }
    }

    /// Only 1 MiB throughput samples (bytes per second), each after a few round trips as in the
    /// full run, for profiling.
    nonisolated func throughputsOnly(count: Int) async throws -> [Double] {
        try await withEchoConnection { _, connection, small in
            let bulk = ExtensionMessage([UInt8](repeating: UInt8(ascii: "y"), count: Self.bulkSize))
            let barrier = ExtensionMessage(Array("barrier".utf8))
            var samples: [Double] = []
            for _ in 0..<count {
                for _ in 0..<30 { try await roundTrip(connection, small) }
                samples.append(try await throughputAPI(connection, bulk: bulk, barrier: barrier))
            }
            return samples
        }
    }

    /// Only round trips, for profiling: the launch and the connection happen before the timed
    /// part. The wall-clock samples, and the CPU time and context switches of each side over them.
    nonisolated func roundTripsOnly(count: Int) async throws -> (samples: [Double], host: Breakdown.Usage, ext: Breakdown.Usage) {
        try await withEchoConnection { process, connection, small in
            var samples: [Double] = []
            samples.reserveCapacity(count)
            let pids = process.sandbox.processIdentifiers()
            let h0 = Breakdown.usage(of: RUSAGE_SELF.rawValue), e0 = Breakdown.usage(pids: pids)
            for _ in 0..<count {
                let start = now()
                try await roundTrip(connection, small)
                samples.append(now() - start)
            }
            return (samples, Breakdown.usage(of: RUSAGE_SELF.rawValue) - h0, Breakdown.usage(pids: pids) - e0)
        }
    }

    /// The echo extension, one connection to it and a 64-byte message, for `body`.
    private nonisolated func withEchoConnection<T>(
        _ body: (AppExtensionProcess, ExtensionConnection, ExtensionMessage) async throws -> T
    ) async throws -> T {
        let point = AppExtensionPoint(name: "xsb-bench.ipc", securityLevel: securityLevel)
        let echo = AppExtensionIdentity.developmentOnly(bundleIdentifier: "xsb-bench.echo", executablePath: extensionPath, point: point)
        // Long enough that the process is neither suspended nor terminated between iterations.
        let process = try await AppExtensionProcess(configuration: .init(
            identity: echo, suspendAfter: .seconds(60), terminateAfter: .seconds(120)))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        return try await body(process, connection, ExtensionMessage([UInt8](repeating: UInt8(ascii: "x"), count: Self.messageSize)))
    }

    // MARK: Host API

    private nonisolated func roundTrip(_ connection: ExtensionConnection, _ message: ExtensionMessage) async throws {
        let reply = try await connection.send(message)
        guard reply.payload.count == message.payload.count else { fatalError("echo answered \(reply.payload.count) bytes") }
    }

    /// Bytes per second: `messagesPerSample` one-ways of 1 MiB, then a request as a barrier (the
    /// extension's reader takes frames in order, so its reply means every one-way was read).
    nonisolated func throughputAPI(_ connection: ExtensionConnection, bulk: ExtensionMessage,
                                           barrier: ExtensionMessage) async throws -> Double {
        let start = now()
        for _ in 0..<messagesPerSample { try await connection.sendOneWayWaitingForRoom(bulk) }
        _ = try await connection.send(barrier)
        let elapsed = now() - start
        return Double(messagesPerSample * (Self.headerSize + Self.bulkSize)) / elapsed
    }

    /// A new connection to the running extension plus its first reply; seconds.
    private nonisolated func connectOnce(_ process: AppExtensionProcess, _ message: ExtensionMessage) async throws -> Double {
        let start = now()
        let connection = try await process.makeConnection()
        try await roundTrip(connection, message)
        let elapsed = now() - start
        connection.invalidate()
        return elapsed
    }

    /// Launches a fresh extension process, SIGKILLs its sandbox and returns the seconds from
    /// `kill` to its `onInterruption` (time taken inside the callback).
    private nonisolated func killToInterruption(point: AppExtensionPoint) async throws -> Double {
        let identity = AppExtensionIdentity.developmentOnly(bundleIdentifier: "xsb-bench.victim", executablePath: extensionPath, point: point)
        // A one-shot signal from the callback: the first element of a stream.
        let (interrupted, signal) = AsyncStream.makeStream(of: (Double, Termination).self, bufferingPolicy: .bufferingNewest(1))
        let process = try await AppExtensionProcess(configuration: .init(
            identity: identity, onInterruption: { termination in signal.yield((now(), termination)) },
            suspendAfter: .seconds(60), terminateAfter: .seconds(120)))
        defer { process.invalidate() }
        let pid = process.sandbox.pid
        let start = now()
        guard kill(pid, SIGKILL) == 0 else { fatalError("kill(\(pid)): \(String(cString: strerror(errno)))") }
        var iterator = interrupted.makeAsyncIterator()
        guard let (end, termination) = await iterator.next() else { fatalError("no interruption") }
        guard case .killed = termination else { fatalError("victim ended: \(termination)") }
        return end - start
    }

    // MARK: Raw reference

    /// Round-trip times (seconds) of `xsb-pingpong rtt`, placed by the scheduler (`any`) or
    /// pinned (`same`, `cross`).
    private func rawRoundTrips(count: Int, placement: String = "any") throws -> [Double] {
        let output = try capture([pingpongPath, "rtt", "\(Self.messageSize)", "\(count)", placement])
        let samples = output.split(separator: "\n").compactMap { Double($0) }.map { $0 / 1e9 }
        guard samples.count == count else { throw BenchError("xsb-pingpong rtt: unexpected output") }
        return samples
    }

    func rawRoundTripsForBreakdown(count: Int) throws -> [Double] { try rawRoundTrips(count: count) }

    /// Bytes per second of `xsb-pingpong throughput`.
    func rawThroughput() throws -> Double {
        let output = try capture([pingpongPath, "throughput", "\(Self.bulkSize)", "\(messagesPerSample)"])
        let fields = output.split(whereSeparator: \.isWhitespace).compactMap { Double($0) }
        guard fields.count == 2, fields[0] > 0 else { throw BenchError("xsb-pingpong throughput: unexpected output") }
        return fields[1] / (fields[0] / 1e9)
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}


func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Runs `argv` (stdin and stderr from /dev/null and inherited) and returns its standard output;
/// throws unless it exits 0.
func capture(_ argv: [String]) throws -> String {
    var pipeFDs: [Int32] = [-1, -1]
    guard pipe(&pipeFDs) == 0 else { throw BenchError("pipe: \(String(cString: strerror(errno)))") }
    for fd in pipeFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
    let cArgs = argv.map { strdup($0) } + [nil]
    defer { cArgs.forEach { free($0) } }
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ)
    close(pipeFDs[1])
    guard rc == 0 else {
        close(pipeFDs[0])
        throw BenchError("\(argv[0]): \(String(cString: strerror(rc)))")
    }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = buffer.withUnsafeMutableBytes { bytes in retryingInterrupts { read(pipeFDs[0], bytes.baseAddress, bytes.count) } }
        if n <= 0 { break }
        output += buffer[0..<n]
    }
    close(pipeFDs[0])
    var status: Int32 = 0
    _ = retryingInterrupts { waitpid(pid, &status, 0) }
    guard status == 0 else { throw BenchError("\(argv.joined(separator: " ")): exit status \(status)") }
    return String(decoding: output, as: UTF8.self)
}
