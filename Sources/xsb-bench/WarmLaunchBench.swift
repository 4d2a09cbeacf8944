import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime

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
    /// until a sandbox is ready.
    func sample() async throws -> Double {
        while supervisor.poolStatus.ready == 0 { try await Task.sleep(for: .microseconds(200)) }
        let start = now()
        let process = try await supervisor.launch(configuration)
        let termination = await process.waitForExit()
        guard termination == .exited(code: 0) else { fatalError("warm /bin/true: \(termination)") }
        return now() - start
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
}
