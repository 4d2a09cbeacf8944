import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import SandboxSystem

/// Warm launches (``Supervisor/prepare(_:count:)``): a launch of /bin/true from a ready pool of
/// pre-built sandboxes, interleaved with the cold variants of ``XsbBench/launchBench``; the idle
/// cost of a pre-built sandbox; how fast a pool refills; and a burst that outruns the refill.
struct WarmLaunchBench {
    let supervisor: Supervisor
    let configuration: SandboxConfiguration
    static let poolSize = 8

    init(configuration: SandboxConfiguration) throws {
        supervisor = try Supervisor()
        self.configuration = configuration
    }

    /// Fills the pool (timed: the refill rate, sandboxes per second, built one after another).
    func fill() async throws -> Double {
        let start = now()
        try await supervisor.prepare(configuration, count: Self.poolSize)
        return Double(Self.poolSize) / (now() - start)
    }

    /// One launch from a ready pool, to /bin/true's exit and reaping (seconds). Waits, untimed,
    /// until a sandbox is ready, and after the launch until the pool is full again: the refill
    /// is the pool's own work, reported apart (``fill()``, ``burst(_:)``), and must not land in
    /// whatever is timed next (bubblewrap, the CLI).
    func sample() async throws -> Double {
        while supervisor.poolStatus.ready == 0 { try await Task.sleep(for: .microseconds(200)) }
        let start = now()
        let process = try await supervisor.launch(configuration)
        let termination = await process.waitForExit()
        let elapsed = now() - start
        guard termination == .exited(code: 0) else { fatalError("warm /bin/true: \(termination)") }
        let refilled = now() + 2
        while now() < refilled, supervisor.poolStatus.ready < Self.poolSize || supervisor.poolStatus.building > 0 {
            try await Task.sleep(for: .milliseconds(1))
        }
        return elapsed
    }

    /// What one idle pre-built sandbox holds, in KiB (with a full pool: ``SandboxPoolStatus``
    /// says how it is measured).
    func kibPerSandbox() async throws -> Double {
        while supervisor.poolStatus.ready < Self.poolSize { try await Task.sleep(for: .milliseconds(1)) }
        let status = supervisor.poolStatus
        return Double(status.idleMemoryBytes) / Double(status.ready) / 1024
    }

    /// `count` launches back to back, each to its exit, from a full pool of ``poolSize``: the
    /// first few are warm, then they take what the refill (behind them) has built, or go cold.
    /// Returns the median and 90th percentile latency (seconds).
    func burst(_ count: Int) async throws -> (median: Double, p90: Double) {
        while supervisor.poolStatus.ready < Self.poolSize { try await Task.sleep(for: .milliseconds(1)) }
        var samples: [Double] = []
        for _ in 0..<count {
            let start = now()
            let process = try await supervisor.launch(configuration)
            _ = await process.waitForExit()
            samples.append(now() - start)
        }
        let sorted = samples.sorted()
        return (XsbBench.median(samples), sorted[min(sorted.count - 1, sorted.count * 9 / 10)])
    }

    /// `--warm-only N`: N warm launches interleaved with bubblewrap and nothing else, for
    /// profiling the warm path (`perf record -p`): prints the medians and the ratio.
    static func warmOnly(policy: Policy, bwrap: String, iterations: Int) async throws {
        let configuration = SandboxConfiguration(
            executable: "/bin/true", environment: SandboxEnvironment.compose(policy: policy, caller: [:]),
            policy: policy, standardInput: .null, standardOutput: .null, standardError: .null)
        let bwrapArguments = XsbBench.bwrapArguments(bwrap, "/bin/true")
        let warm = try WarmLaunchBench(configuration: configuration)
        _ = try await warm.fill()
        var warmSamples: [Double] = [], bwrapSamples: [Double] = []
        for _ in 0..<iterations {
            let sample = try await warm.sample()
            warmSamples.append(sample)
            let start = now()
            guard XsbBench.spawnAndWait(bwrapArguments) == 0 else { fatalError("bwrap failed") }
            bwrapSamples.append(now() - start)
        }
        await warm.supervisor.drainPool()
        let (w, b) = (XsbBench.median(warmSamples), XsbBench.median(bwrapSamples))
        print(String(format: "warm %.3f ms  bwrap %.3f ms  launch_warm_vs_bwrap %.3f", w * 1000, b * 1000, w / b))
    }

    /// Runs each probe check (its arguments, space-separated) in a pre-built sandbox and in a
    /// cold one, and prints `CHECK: warm TERMINATION OUTPUT | cold TERMINATION OUTPUT` for each
    /// whose outcomes differ, or that did not run warm. Returns the exit status: 0 when none did.
    static func probeWarmAndCold(probe: String, policy: Policy, checks: [String]) async throws -> Int32 {
        let warm = try Supervisor(), cold = try Supervisor()
        func configuration(_ arguments: [String], output: SandboxConfiguration.StandardStream) -> SandboxConfiguration {
            SandboxConfiguration(
                executable: probe, arguments: ["xsb-probe"] + arguments,
                environment: SandboxEnvironment.compose(policy: policy, caller: ProcessInfo.processInfo.environment),
                policy: policy, standardOutput: output)
        }
        func run(_ supervisor: Supervisor, _ arguments: [String]) async throws -> String {
            var ends: [Int32] = [-1, -1]
            guard pipe(&ends) == 0, let readEnd = FileDescriptor(adopting: ends[0]), let writeEnd = FileDescriptor(adopting: ends[1]) else {
                throw POSIXError(.EMFILE)
            }
            let process = try await supervisor.launch(configuration(arguments, output: .fileDescriptor(writeEnd)))
            writeEnd.close()
            let termination = await process.waitForExit()
            var output = [UInt8](), buffer = [UInt8](repeating: 0, count: 4096)
            while case let n = read(readEnd.rawValue, &buffer, buffer.count), n > 0 { output += buffer[0..<n] }
            return "\(termination) \(String(decoding: output, as: UTF8.self))"
        }
        var status: Int32 = 0
        for check in checks {
            let arguments = check.split(separator: " ").map(String.init)
            let reservation = try await warm.prepare(configuration([], output: .inherit), count: 1)
            let before = warm.poolStatus.ready
            let warmOutcome = try await run(warm, arguments)
            await warm.release(reservation)
            let wasWarm = before == 1
            let coldOutcome = try await run(cold, arguments)
            if warmOutcome != coldOutcome || !wasWarm {
                print("\(check): warm \(wasWarm ? "" : "(not from the pool) ")\(warmOutcome) | cold \(coldOutcome)")
                status = 1
            } else {
                print("\(check): \(warmOutcome.prefix { $0 != "\n" })")
            }
        }
        await warm.drainPool()
        return status
    }
}
