import ExtSandbox
import ExtSandboxWire
import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import TextFilterContract

/// `xsb-bench --breakdown`: where the host API's round trip and connect time go. The same
/// 64-byte round trip, interleaved, over five paths that differ in one part each:
///
/// | path | host side | extension side |
/// |---|---|---|
/// | raw | C, blocking | C, blocking (no sandbox, no framing) |
/// | wire → C ext | `FrameSocket`, blocking, one thread | `xsb-pingpong extension`: C, one thread, sandboxed |
/// | API → C ext | host API (`ExtensionConnection.send`) | the same C extension |
/// | wire → SDK ext | `FrameSocket`, blocking | the echo fixture (Swift SDK), sandboxed |
/// | API → SDK ext | host API | the echo fixture: what `rtt_64b_vs_raw` measures |
/// | distributed → SDK ext | a `@Resolvable` proxy | the actors fixture: what `rtt_distributed_vs_raw` measures |
///
/// with CPU time and context switches per round trip on each side (host: getrusage of this
/// process, or of the reaped `xsb-pingpong` for raw; extension: /proc of its sandbox); then
/// connect + first reply, and 1 MiB one-way throughput, over the same paths; and the encoder's share
/// of the distributed call (its envelope, arguments and result encoded and decoded in this process).
struct Breakdown {
    let bench: IPCBench
    let policy: Policy
    /// The actors fixture: its distributed call is measured beside the others (and the encoder's
    /// share of it), when given.
    var actorsExtensionPath: String?

    /// A blocking host of one extension, speaking the wire protocol itself.
    final class DirectHost: @unchecked Sendable {
        let control: FrameSocket
        let sandbox: SandboxedProcess
        var nextConnection: UInt64 = 1

        init(control: FrameSocket, sandbox: SandboxedProcess) {
            self.control = control
            self.sandbox = sandbox
        }

        /// CONNECT and the HELLO exchange; the caller owns the socket.
        func connect() throws -> FrameSocket {
            let (host, ext) = try FrameSocket.makeSocketPair()
            try control.send(.connect(id: nextConnection, descriptor: ext))
            ext.close()
            nextConnection += 1
            let socket = FrameSocket(descriptor: host)
            try socket.send(.hello(Hello(name: "xsb-bench")))
            guard let hello = try socket.receive(), hello.kind == .hello else { throw BenchError("no HELLO from the extension") }
            return socket
        }
    }

    func launchDirect(executable: String, arguments: [String]) async throws -> DirectHost {
        let (hostFD, extFD) = try FrameSocket.makeSocketPair()
        let configuration = SandboxConfiguration(
            executable: executable, arguments: [executable] + arguments,
            environment: SandboxEnvironment.compose(policy: policy, caller: [:]),
            policy: policy, standardInput: .null, standardOutput: .inherit, standardError: .inherit,
            extraFileDescriptors: [extFD])
        let sandbox = try await Supervisor.shared.launch(configuration)
        extFD.close()
        let host = DirectHost(control: FrameSocket(descriptor: hostFD), sandbox: sandbox)
        guard let ready = try host.control.receive(), ready.kind == .ready else { throw BenchError("no READY from \(executable)") }
        return host
    }

    struct Usage {
        var cpu: Double = 0
        var switches: Double = 0
        static func - (a: Usage, b: Usage) -> Usage { Usage(cpu: a.cpu - b.cpu, switches: a.switches - b.switches) }
        static func + (a: Usage, b: Usage) -> Usage { Usage(cpu: a.cpu + b.cpu, switches: a.switches + b.switches) }
    }

    /// CPU seconds and context switches (voluntary and not) of `RUSAGE_SELF` or `RUSAGE_CHILDREN`.
    static func usage(of who: Int32) -> Usage {
        var u = rusage()
        getrusage(who, &u)
        return Usage(cpu: Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6,
                     switches: Double(u.ru_nvcsw + u.ru_nivcsw))
    }

    /// CPU seconds (schedstat: exact) and context switches of every thread of `pids`.
    static func usage(pids: [pid_t]) -> Usage {
        var total = Usage()
        for pid in pids {
            for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? [] {
                let base = "/proc/\(pid)/task/\(task)"
                if let text = try? String(contentsOfFile: base + "/schedstat", encoding: .utf8),
                   let ns = text.split(separator: " ").first.flatMap({ Double($0) }) {
                    total.cpu += ns / 1e9
                }
                if let status = try? String(contentsOfFile: base + "/status", encoding: .utf8) {
                    for line in status.split(separator: "\n") where line.contains("ctxt_switches:") {
                        total.switches += Double(line.split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) ?? 0
                    }
                }
            }
        }
        return total
    }

    struct Variant {
        var wall: [Double] = []
        var host = Usage()
        var ext = Usage()
        var count = 0
    }

    func run(rounds: Int, perRound: Int = 500) async throws -> (table: [String], report: [String: Any]) {
        let payload = [UInt8](repeating: UInt8(ascii: "x"), count: IPCBench.messageSize)
        let message = ExtensionMessage(payload)
        let cDirect = try await launchDirect(executable: bench.pingpongPath, arguments: ["extension"])
        let swiftDirect = try await launchDirect(executable: bench.extensionPath, arguments: [])
        let cSocket = try cDirect.connect(), swiftSocket = try swiftDirect.connect()
        defer {
            cSocket.close()
            swiftSocket.close()
            cDirect.sandbox.kill()
            swiftDirect.sandbox.kill()
        }
        let point = AppExtensionPoint(name: "xsb-bench.breakdown", securityLevel: bench.securityLevel)
        func handle(_ id: String, _ path: String, _ arguments: [String]) async throws -> AppExtensionProcess {
            try await AppExtensionProcess(configuration: .init(
                identity: AppExtensionIdentity.developmentOnly(bundleIdentifier: id, executablePath: path, point: point, arguments: arguments),
                suspendAfter: .seconds(60), terminateAfter: .seconds(120)))
        }
        let cProcess = try await handle("xsb-bench.breakdown.c", bench.pingpongPath, ["extension"])
        let swiftProcess = try await handle("xsb-bench.breakdown.swift", bench.extensionPath, [])
        let cConnection = try await cProcess.makeConnection(), swiftConnection = try await swiftProcess.makeConnection()
        defer {
            cConnection.invalidate()
            swiftConnection.invalidate()
            cProcess.invalidate()
            swiftProcess.invalidate()
        }
        // A distributed call of the same size: `apply` with a 64-byte String, through the proxy.
        var actorsProcess: AppExtensionProcess?, filter: $TextFilter?
        if let actorsExtensionPath {
            let process = try await handle("xsb-bench.breakdown.actors", actorsExtensionPath, [])
            actorsProcess = process
            // The proxy keeps its connection open.
            filter = try await process.makeConnection().remoteObject($TextFilter.self)
        }
        defer { actorsProcess?.invalidate() }
        let text = String(repeating: "x", count: IPCBench.messageSize), options = FilterOptions(shout: false)
        var coding: [Double] = []

        var nextID: UInt64 = 1
        func wire(_ socket: FrameSocket) throws {
            try socket.send(.request(id: nextID, payload: payload))
            guard let reply = try socket.receive(), reply.kind == .reply, reply.id == nextID else { throw BenchError("bad REPLY") }
            nextID += 1
        }
        func wireConnect(_ host: DirectHost) throws {
            let socket = try host.connect()
            try socket.send(.request(id: 1, payload: payload))
            guard let reply = try socket.receive(), reply.kind == .reply else { throw BenchError("bad REPLY") }
            try? socket.send(.goodbye)
            socket.close()
        }
        func apiConnect(_ process: AppExtensionProcess) async throws {
            let connection = try await process.makeConnection()
            _ = try await connection.send(message)
            connection.invalidate()
        }

        // Warm-up.
        for _ in 0..<100 {
            try wire(cSocket)
            try wire(swiftSocket)
            _ = try await cConnection.send(message)
            _ = try await swiftConnection.send(message)
            _ = try await filter?.apply(text, options: options)
        }
        _ = try bench.rawRoundTripsForBreakdown(count: 100)

        var v: [String: Variant] = [:]
        var throughput: [String: [Double]] = [:]
        let bulk = ExtensionMessage([UInt8](repeating: UInt8(ascii: "y"), count: IPCBench.bulkSize))
        /// Bytes per second of one-ways written by a blocking host, with a request as barrier.
        func wireThroughput(_ socket: FrameSocket) throws -> Double {
            let start = now()
            for _ in 0..<bench.messagesPerSample { try socket.send(.oneway(payload: bulk.payload)) }
            try wire(socket)
            return Double(bench.messagesPerSample * (IPCBench.headerSize + IPCBench.bulkSize)) / (now() - start)
        }
        func measure(_ key: String, pids: [pid_t], count: Int, _ body: () async throws -> Void) async rethrows {
            let h0 = Self.usage(of: RUSAGE_SELF.rawValue), e0 = Self.usage(pids: pids)
            for _ in 0..<count {
                let start = now()
                try await body()
                v[key, default: Variant()].wall.append(now() - start)
            }
            v[key, default: Variant()].host = v[key]!.host + (Self.usage(of: RUSAGE_SELF.rawValue) - h0)
            v[key, default: Variant()].ext = v[key]!.ext + (Self.usage(pids: pids) - e0)
            v[key, default: Variant()].count += count
        }
        let cPids = cDirect.sandbox.processIdentifiers(), swiftPids = swiftDirect.sandbox.processIdentifiers()
        let cAPIPids = cProcess.sandbox.processIdentifiers(), swiftAPIPids = swiftProcess.sandbox.processIdentifiers()
        for _ in 0..<rounds {
            let h0 = Self.usage(of: RUSAGE_CHILDREN.rawValue)
            v["raw", default: Variant()].wall += try bench.rawRoundTripsForBreakdown(count: perRound)
            v["raw"]!.host = v["raw"]!.host + (Self.usage(of: RUSAGE_CHILDREN.rawValue) - h0)
            v["raw"]!.count += perRound
            try await measure("wire_c", pids: cPids, count: perRound) { try wire(cSocket) }
            try await measure("api_c", pids: cAPIPids, count: perRound) { _ = try await cConnection.send(message) }
            try await measure("wire_sdk", pids: swiftPids, count: perRound) { try wire(swiftSocket) }
            try await measure("api_sdk", pids: swiftAPIPids, count: perRound) { _ = try await swiftConnection.send(message) }
            if let filter, let actorsProcess {
                try await measure("api_distributed", pids: actorsProcess.sandbox.processIdentifiers(), count: perRound) {
                    _ = try await filter.apply(text, options: options)
                }
                coding.append(try DistributedBench.coding(text, options))
            }
            try await measure("connect_wire_c", pids: [], count: 5) { try wireConnect(cDirect) }
            try await measure("connect_api_c", pids: [], count: 5) { try await apiConnect(cProcess) }
            try await measure("connect_wire_sdk", pids: [], count: 5) { try wireConnect(swiftDirect) }
            try await measure("connect_api_sdk", pids: [], count: 5) { try await apiConnect(swiftProcess) }
            throughput["raw", default: []].append(try bench.rawThroughput())
            throughput["wire_c", default: []].append(try wireThroughput(cSocket))
            throughput["api_c", default: []].append(try await bench.throughputAPI(cConnection, bulk: bulk, barrier: message))
            throughput["wire_sdk", default: []].append(try wireThroughput(swiftSocket))
            throughput["api_sdk", default: []].append(try await bench.throughputAPI(swiftConnection, bulk: bulk, barrier: message))
        }

        var report: [String: Any] = [:]
        var lines: [String] = []
        lines.append("where the time goes: 64-byte round trips, \(rounds) interleaved rounds, median; per round trip:")
        lines.append("path                         median us   host cpu us  host cs   ext cpu us  ext cs")
        let labels = [("raw", "raw C <-> C (reference)"), ("wire_c", "wire host -> C ext"), ("api_c", "host API -> C ext"),
                      ("wire_sdk", "wire host -> SDK ext"), ("api_sdk", "host API -> SDK ext (bench)"),
                      ("api_distributed", "distributed call -> SDK ext"),
                      ("connect_wire_c", "connect+reply wire -> C"), ("connect_api_c", "connect+reply API -> C"),
                      ("connect_wire_sdk", "connect+reply wire -> SDK"), ("connect_api_sdk", "connect+reply API -> SDK")]
        for (key, label) in labels {
            guard let variant = v[key] else { continue }
            let n = Double(variant.count)
            let wall = XsbBench.median(variant.wall)
            var line = label.padding(toLength: 28, withPad: " ", startingAt: 0) + String(format: "%10.1f", wall * 1e6)
            var entry: [String: Any] = ["median_us": XsbBench.rounded(wall * 1e6)]
            if !key.hasPrefix("connect") {
                line += String(format: "   %11.1f  %7.2f", variant.host.cpu / n * 1e6, variant.host.switches / n)
                if key != "raw" {
                    line += String(format: "   %10.1f  %6.2f", variant.ext.cpu / n * 1e6, variant.ext.switches / n)
                }
                entry["host_cpu_us"] = XsbBench.rounded(variant.host.cpu / n * 1e6)
                entry["host_context_switches"] = XsbBench.rounded(variant.host.switches / n)
                if key != "raw" {
                    entry["extension_cpu_us"] = XsbBench.rounded(variant.ext.cpu / n * 1e6)
                    entry["extension_context_switches"] = XsbBench.rounded(variant.ext.switches / n)
                }
            }
            lines.append(line)
            report[key] = entry
        }
        lines.append("1 MiB one-way throughput, MiB/s (median): " + [("raw", "raw"), ("wire_c", "wire -> C"), ("api_c", "API -> C"),
            ("wire_sdk", "wire -> SDK"), ("api_sdk", "API -> SDK")].map { key, label in
            String(format: "%@ %.0f", label, XsbBench.median(throughput[key]!) / 1048576)
        }.joined(separator: ", "))
        report["throughput_mib_per_s"] = throughput.mapValues { XsbBench.rounded(XsbBench.median($0) / 1048576) }
        if let distributed = v["api_distributed"], !coding.isEmpty {
            // In this process, alone: what both sides' encoders and decoders take of one such call.
            let codingTime = XsbBench.median(coding), call = XsbBench.median(distributed.wall)
            report["distributed_coding_us"] = XsbBench.rounded(codingTime * 1e6)
            report["distributed_coding_share"] = XsbBench.rounded(codingTime / call)
            lines.append(String(format: "encoder's share of the distributed call: encoding + decoding its envelope, arguments and result %.1f us of %.1f us (%.0f%%)",
                                codingTime * 1e6, call * 1e6, codingTime / call * 100))
        }
        lines.append("(raw: both C processes together under \"host\"; cs = context switches, voluntary and involuntary)")
        return (lines, report)
    }
}
