import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime

/// `xsb-bench`: launch benchmarks, each reported as a median and as a ratio against a
/// reference measured in the same run (absolute times across runs mean little on shared machines).
///
///     xsb-bench [--json] [--iterations N] [--policy PATH] [--cli PATH]
@main
struct XsbBench {
    static func main() async throws {
        var arguments = Array(CommandLine.arguments.dropFirst())
        func option(_ name: String) -> String? {
            guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
            defer { arguments.removeSubrange(index...index + 1) }
            return arguments[index + 1]
        }
        let json = arguments.contains("--json")
        let iterations = Int(option("--iterations") ?? "") ?? 200
        let ownDirectory = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]).deletingLastPathComponent().path
        let cli = option("--cli") ?? ownDirectory + "/extsandbox"
        let policyPath = option("--policy")
        let policy = try policyPath.map { try PolicyLoader.load(file: $0) }
            ?? PolicyLoader.load(nameOrPath: "standard", searchPath: .default(executablePath: ownDirectory + "/xsb-bench"))
        guard let bwrap = ["/usr/bin/bwrap", "/bin/bwrap"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            FileHandle.standardError.write(Data("xsb-bench: bubblewrap is missing (scripts/bench installs it)\n".utf8))
            exit(2)
        }

        let truePath = "/bin/true"
        let configuration = SandboxConfiguration(
            executable: truePath, environment: SandboxEnvironment.compose(policy: policy, caller: [:]),
            policy: policy, standardInput: .null, standardOutput: .null, standardError: .null)
        let bwrapArguments = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                              "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                              "--proc", "/proc", "--dev", "/dev", truePath]

        // Warm up every path once (page cache, policy compilation, lazy initialisation).
        _ = await (try await Supervisor.shared.launch(configuration)).waitForExit()
        _ = spawnAndWait([cli, "exec", "--", truePath])
        _ = spawnAndWait(bwrapArguments)

        // Interleave the variants so that machine noise hits all of them alike.
        var samples: [String: [Double]] = [:]
        for _ in 0..<iterations {
            var start = now()
            let process = try await Supervisor.shared.launch(configuration)
            let termination = await process.waitForExit()
            samples["launch_api", default: []].append(now() - start)
            guard termination == .exited(code: 0) else { fatalError("sandboxed /bin/true: \(termination)") }

            start = now()
            guard spawnAndWait([cli, "exec", "--", truePath]) == 0 else { fatalError("extsandbox exec failed") }
            samples["exec_cli", default: []].append(now() - start)

            start = now()
            guard spawnAndWait(bwrapArguments) == 0 else { fatalError("bwrap failed") }
            samples["bwrap", default: []].append(now() - start)

            start = now()
            _ = spawnAndWait([truePath])
            samples["bare_spawn", default: []].append(now() - start)
        }

        let medians = samples.mapValues(median)
        let bwrapMedian = medians["bwrap"]!
        let report: [String: Any] = [
            "iterations": iterations,
            "median_ms": medians.mapValues { ($0 * 1000 * 1000).rounded() / 1000 },
            "launch_api_vs_bwrap": rounded(medians["launch_api"]! / bwrapMedian),
            "exec_cli_vs_bwrap": rounded(medians["exec_cli"]! / bwrapMedian),
            "launch_api_vs_bare_spawn": rounded(medians["launch_api"]! / medians["bare_spawn"]!),
            "targets": ["launch_api_vs_bwrap": "<= 1.0", "exec_cli_vs_bwrap": "<= 2.0"],
            "cgroup_limits": Supervisor.shared.hasCgroupLimits,
        ]
        if json {
            let data = try JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print("launch of /bin/true to exit, \(iterations) interleaved runs, median")
            print("variant                          median ms   vs bwrap")
            for (key, label) in [("launch_api", "runtime launch API (full sandbox)"), ("exec_cli", "extsandbox exec -- /bin/true"),
                                 ("bwrap", "bwrap --unshare-all (reference)"), ("bare_spawn", "bare spawn of /bin/true")] {
                let ms = medians[key]! * 1000
                print(label.padding(toLength: 33, withPad: " ", startingAt: 0) + String(format: "%9.3f   %8.2f", ms, medians[key]! / bwrapMedian))
            }
            print("targets: launch_api_vs_bwrap <= 1.0, exec_cli_vs_bwrap <= 2.0")
        }
    }

    static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    /// posix_spawn + waitpid with output discarded; returns the exit status.
    static func spawnAndWait(_ argv: [String]) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in [0, 1, 2] { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0) }
        let cArgs = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ) == 0 else { return -1 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
