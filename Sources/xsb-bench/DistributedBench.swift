import ExtSandbox
import Foundation
import Glibc
import TextFilterContract

/// Distributed calls through a `@Resolvable` proxy, measured after ``IPCBench`` in the same run
/// and set against its raw C references (whose round trip is bimodal: one reference for both
/// keeps their ratios comparable):
///
/// - `rtt_distributed`: `apply(_:options:)` of the actors fixture (Tests/Fixtures/xsb-actors-extension)
///   with a 64-byte `String` argument and result, against the 64-byte raw ping-pong.
/// - `throughput_distributed_1mib`: `count(_:)` with a 1 MiB `[UInt8]` argument, four calls in
///   flight, against the raw socketpair throughput.
/// - the encoder's share: encoding and decoding the small call's envelope and values alone, in
///   this process, over the distributed round trip.
struct DistributedBench: Sendable {
    var actorsExtensionPath: String
    /// The IPC benchmark's settings (policy, message sizes).
    var raw: IPCBench
    var rounds: Int
    var callsPerRound = 1000
    var bulkCallsPerSample = 64

    struct Results: Sendable {
        var rtt: [Double] = []
        /// Bytes per second.
        var throughput: [Double] = []
        /// Seconds to encode and decode one small call's envelope and values.
        var coding: [Double] = []
    }

    /// The actors fixture, a proxy for its filter after 200 small calls, and the calls' arguments, for `body`.
    private nonisolated func withFilter<T>(
        _ body: (AppExtensionProcess, $TextFilter, _ text: String, FilterOptions, _ bulk: [UInt8]) async throws -> T
    ) async throws -> T {
        let point = AppExtensionPoint(name: "xsb-bench.distributed", securityLevel: raw.securityLevel)
        let identity = AppExtensionIdentity.developmentOnly(bundleIdentifier: "xsb-bench.actors", executablePath: actorsExtensionPath, point: point)
        let process = try await AppExtensionProcess(configuration: .init(identity: identity, suspendAfter: .seconds(60), terminateAfter: .seconds(120)))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        let filter = try connection.remoteObject($TextFilter.self)
        let text = String(repeating: "x", count: IPCBench.messageSize)
        let options = FilterOptions(shout: false)
        for _ in 0..<200 { _ = try await filter.apply(text, options: options) }
        return try await body(process, filter, text, options, [UInt8](repeating: UInt8(ascii: "y"), count: IPCBench.bulkSize))
    }

    nonisolated func run() async throws -> Results {
        try await withFilter { _, filter, text, options, bulk in try await run(filter, text, options, bulk) }
    }

    private nonisolated func run(_ filter: $TextFilter, _ text: String, _ options: FilterOptions, _ bulk: [UInt8]) async throws -> Results {
        _ = try await throughput(filter, bulk)
        var results = Results()
        for _ in 0..<rounds {
            for _ in 0..<callsPerRound {
                let start = now()
                let reply = try await filter.apply(text, options: options)
                results.rtt.append(now() - start)
                guard reply.utf8.count == IPCBench.messageSize else { throw BenchError("apply answered \(reply.utf8.count) bytes") }
            }
            results.throughput.append(try await throughput(filter, bulk))
            results.coding.append(try coding(text, options))
        }
        return results
    }

    /// What one kind of call costs, for profiling (`--profile-distributed`): wall-clock samples
    /// and CPU time and context switches per call on each side.
    struct Profile {
        var wall: [Double] = []
        var host = Breakdown.Usage()
        var ext = Breakdown.Usage()
        var calls = 0
    }

    /// Only `count` small calls and `bulkCount` 1 MiB calls (four in flight), after a warm-up:
    /// for `perf record` sessions and A/B runs.
    nonisolated func profile(count: Int, bulkCount: Int) async throws -> (small: Profile, bulk: Profile) {
        try await withFilter { process, filter, text, options, bulk in
            try await profile(process, filter, text, options, bulk, count: count, bulkCount: bulkCount)
        }
    }

    private nonisolated func profile(_ process: AppExtensionProcess, _ filter: $TextFilter, _ text: String, _ options: FilterOptions,
                                     _ bulk: [UInt8], count: Int, bulkCount: Int) async throws -> (small: Profile, bulk: Profile) {
        if bulkCount > 0 { _ = try await throughput(filter, bulk) }
        let pids = process.sandbox.processIdentifiers()
        var small = Profile(), large = Profile()
        var h0 = Breakdown.usage(of: RUSAGE_SELF.rawValue), e0 = Breakdown.usage(pids: pids)
        for _ in 0..<count {
            let start = now()
            _ = try await filter.apply(text, options: options)
            small.wall.append(now() - start)
        }
        small.host = Breakdown.usage(of: RUSAGE_SELF.rawValue) - h0
        small.ext = Breakdown.usage(pids: pids) - e0
        small.calls = count
        h0 = Breakdown.usage(of: RUSAGE_SELF.rawValue)
        e0 = Breakdown.usage(pids: pids)
        for _ in 0..<(bulkCount + bulkCallsPerSample - 1) / bulkCallsPerSample {
            large.wall.append(try await throughput(filter, bulk))
            large.calls += bulkCallsPerSample
        }
        large.host = Breakdown.usage(of: RUSAGE_SELF.rawValue) - h0
        large.ext = Breakdown.usage(pids: pids) - e0
        return (small, large)
    }

    /// Bytes per second of `bulkCallsPerSample` calls of `count(_:)` with 1 MiB, four in flight.
    private nonisolated func throughput(_ filter: $TextFilter, _ bulk: [UInt8]) async throws -> Double {
        let start = now()
        try await withThrowingTaskGroup(of: Int.self) { group in
            let inFlight = 4
            for _ in 0..<inFlight { group.addTask { try await filter.count(bulk) } }
            var started = inFlight
            while let counted = try await group.next() {
                guard counted == bulk.count else { throw BenchError("count answered \(counted)") }
                if started < bulkCallsPerSample {
                    started += 1
                    group.addTask { try await filter.count(bulk) }
                }
            }
        }
        return Double(bulkCallsPerSample * (IPCBench.headerSize + bulk.count)) / (now() - start)
    }

    /// Seconds per encode + decode of the small call's envelope, arguments and result.
    private nonisolated func coding(_ text: String, _ options: FilterOptions) throws -> Double {
        try Self.coding(text, options)
    }

    /// Seconds per encode + decode of the small call's envelope, arguments and result.
    static func coding(_ text: String, _ options: FilterOptions) throws -> Double {
        let count = 1000
        let start = now()
        for _ in 0..<count {
            // What both sides do for one call: the caller's envelope and arguments, the callee's
            // reading of them, its result, the caller's reading of that.
            let envelope = try CallEnvelope(target: "extension", method: "$s18TextFilterContract01$aB0C5apply_7optionsS2S_AA0B7OptionsVtYaKFTE",
                                            arguments: [ValueCoding.encode(text)[...], ValueCoding.encode(options)[...]]).encoded()
            let received = try CallEnvelope(decoding: envelope)
            let argument = try ValueCoding.decode(String.self, from: Array(received.arguments[0]))
            _ = try ValueCoding.decode(FilterOptions.self, from: Array(received.arguments[1]))
            _ = try ValueCoding.decode(String.self, from: ValueCoding.encode(argument))
        }
        return (now() - start) / Double(count)
    }
}
