import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime

/// `xsb-bench host-size`: what a sandbox costs as a function of its host's size (issue 14,
/// "launch cost grows with the host's size" and "the host's memory leaks into every sandbox").
///
///     xsb-bench host-size [--heap-mib N] [--launches N] [--sandboxes N] [--policy PATH]
///
/// The host first allocates and touches a heap of `--heap-mib` MiB (default 512). Then:
/// - `launch_ms_median`: `--launches` (default 20) launches of `/bin/true` to its exit.
/// - `machine_kib_per_sandbox`: `--sandboxes` (default 50) sandboxes of `/bin/sleep`, kept alive,
///   the host rewriting its whole heap before each launch (as a real host's heap changes); the
///   drop of `MemAvailable` across them, divided by their number (it includes each sandbox's own
///   `sleep`, about the same for any host).
/// Prints one JSON object.
enum HostSizeBench {
    static func run(arguments: [String]) async throws {
        func value(_ name: String, _ fallback: Int) -> Int {
            guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return fallback }
            return Int(arguments[index + 1]) ?? fallback
        }
        let heapMiB = value("--heap-mib", 512)
        let launches = value("--launches", 20)
        let sandboxes = value("--sandboxes", 50)
        let policy: Policy
        if let index = arguments.firstIndex(of: "--policy"), index + 1 < arguments.count {
            policy = try PolicyLoader.load(file: arguments[index + 1])
        } else {
            policy = try PolicyLoader.load(nameOrPath: "standard", searchPath: .default(executablePath: PolicySearchPath.currentExecutable()))
        }

        let heapBytes = heapMiB << 20
        let heap = UnsafeMutableRawPointer.allocate(byteCount: max(heapBytes, 1), alignment: 4096)
        defer { heap.deallocate() }
        var generation: UInt8 = 1
        func rewriteHeap() {
            memset(heap, Int32(generation), heapBytes)
            generation &+= 1
        }
        rewriteHeap()

        func configuration(_ argv: [String]) -> SandboxConfiguration {
            SandboxConfiguration(
                executable: argv[0], arguments: argv, environment: SandboxEnvironment.compose(policy: policy, caller: [:]),
                policy: policy, standardInput: .null, standardOutput: .null, standardError: .null)
        }
        let truth = configuration(["/bin/true"])
        _ = await (try await Supervisor.shared.launch(truth)).waitForExit()  // warm-up
        var samples: [Double] = []
        for _ in 0..<launches {
            let start = DispatchTime.now().uptimeNanoseconds
            let process = try await Supervisor.shared.launch(truth)
            _ = await process.waitForExit()
            samples.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
        }
        samples.sort()

        let sleeper = configuration(["/bin/sleep", "1000"])
        let before = memAvailableKiB()
        var running: [SandboxedProcess] = []
        for _ in 0..<sandboxes {
            rewriteHeap()
            running.append(try await Supervisor.shared.launch(sleeper))
        }
        try await Task.sleep(for: .milliseconds(500))
        let after = memAvailableKiB()
        for process in running { process.kill() }
        for process in running { _ = await process.waitForExit() }

        let report: [String: Any] = [
            "heap_mib": heapMiB, "launches": launches, "sandboxes": sandboxes,
            "launch_ms_median": (samples[samples.count / 2] * 1000).rounded() / 1000,
            "launch_ms_min": (samples[0] * 1000).rounded() / 1000,
            "machine_kib_per_sandbox": sandboxes > 0 ? (before - after) / sandboxes : 0,
        ]
        let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
        print(String(decoding: data, as: UTF8.self))
    }

    static func memAvailableKiB() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("MemAvailable:") {
            return Int(line.split(separator: " ")[1]) ?? 0
        }
        return 0
    }
}
