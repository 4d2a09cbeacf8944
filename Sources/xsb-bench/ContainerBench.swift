import ExtSandbox
import Foundation
import Glibc

/// What an extension's private container adds to a launch (docs/containers.md): the echo
/// extension launched through the host API to READY and ended again, with a private container
/// and without one, against bubblewrap running /bin/true with a writable bind of a directory
/// (the reference), interleaved. For a root caller the container is a bounded ext4 image
/// (loop device, mount, placement, bind, unmount at the end); for an unprivileged caller a
/// directory bind (not bounded).
///
/// - `launch_with_container_vs_bwrap`: launch + end with a container / bwrap.
/// - `launch_without_container_vs_bwrap`: the same without a container.
/// - `container_adds_ms`: the difference of the two medians.
/// - `container_first_launch_ms`: the first launch, which makes the container (for root:
///   the image, with mke2fs).
enum ContainerBench {
    struct Result {
        var withContainer: [Double] = []
        var without: [Double] = []
        var bwrap: [Double] = []
        var firstLaunch: Double = 0
        var bound = ""
    }

    static func run(extensionPath: String, securityLevel: String, bwrap: String, iterations: Int) async throws -> Result {
        let scratch = NSTemporaryDirectory() + "xsb-bench-containers-\(getpid())"
        try FileManager.default.createDirectory(atPath: scratch + "/bwrap-data", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        // Development identities keep their containers where the environment says.
        setenv("EXTSANDBOX_CONTAINER_DIR", scratch + "/containers", 1)
        let plain = AppExtensionPoint(name: "org.extsandbox.bench", securityLevel: securityLevel)
        var bounded = plain
        bounded.container = ContainerBudget(bytes: 64 << 20, inodes: 4096)
        let withContainer = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "org.extsandbox.bench.container", executablePath: extensionPath, point: bounded)
        let without = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "org.extsandbox.bench.plain", executablePath: extensionPath, point: plain)
        let bwrapArguments = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                              "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                              "--proc", "/proc", "--dev", "/dev", "--bind", scratch + "/bwrap-data", "/container", "/bin/true"]

        var result = Result()
        var start = now()
        switch try await launchAndEnd(withContainer) {
        case .enforced(let budget): result.bound = "enforced (\(budget.bytes >> 20) MiB, \(budget.inodes) inodes)"
        case .notEnforced(let reason): result.bound = "not enforced: " + reason
        case .noContainer: throw BenchError("the container bench's extension got no container")
        }
        result.firstLaunch = now() - start
        _ = try await launchAndEnd(without)
        _ = XsbBench.spawnAndWait(bwrapArguments)
        for _ in 0..<iterations {
            start = now()
            _ = try await launchAndEnd(withContainer)
            result.withContainer.append(now() - start)
            start = now()
            _ = try await launchAndEnd(without)
            result.without.append(now() - start)
            start = now()
            guard XsbBench.spawnAndWait(bwrapArguments) == 0 else { throw BenchError("bwrap with a writable bind failed") }
            result.bwrap.append(now() - start)
        }
        return result
    }

    /// Launches `identity` (to READY), ends it and waits for its sandbox's end; its container's bound.
    private static func launchAndEnd(_ identity: AppExtensionIdentity) async throws -> ContainerBound {
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        let sandbox = process.sandbox
        let bound = process.containerBound
        process.invalidate()
        _ = await sandbox.waitForExit()
        return bound
    }
}

extension ContainerBench {
    /// Runs the bench and adds its figures to `xsb-bench`'s report and table.
    static func report(into report: inout [String: Any], targets: inout [String: String], table: inout [String],
                       extensionPath: String, securityLevel: String, iterations: Int) async throws {
        guard let bwrap = ["/usr/bin/bwrap", "/bin/bwrap"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw BenchError("bubblewrap is missing (scripts/bench installs it)")
        }
        let result = try await run(extensionPath: extensionPath, securityLevel: securityLevel, bwrap: bwrap, iterations: iterations)
        let with = XsbBench.median(result.withContainer), without = XsbBench.median(result.without), reference = XsbBench.median(result.bwrap)
        report["launch_with_container_vs_bwrap"] = XsbBench.rounded(with / reference)
        report["container"] = [
            "iterations": iterations,
            "bound": result.bound,
            "launch_with_container_ms": XsbBench.rounded(with * 1000),
            "launch_without_container_ms": XsbBench.rounded(without * 1000),
            "bwrap_with_bind_ms": XsbBench.rounded(reference * 1000),
            "launch_without_container_vs_bwrap": XsbBench.rounded(without / reference),
            "container_adds_ms": XsbBench.rounded((with - without) * 1000),
            "container_first_launch_ms": XsbBench.rounded(result.firstLaunch * 1000),
        ] as [String: Any]
        if !table.isEmpty { table.append("") }
        table.append("extension launch to READY and end, with and without a private container, \(iterations) interleaved runs, median")
        table.append(String(format: "with a container      %9.3f ms   %6.2f x bwrap", with * 1000, with / reference))
        table.append(String(format: "without               %9.3f ms   %6.2f x bwrap", without * 1000, without / reference))
        table.append(String(format: "bwrap /bin/true, rw bind %6.3f ms   (reference)", reference * 1000))
        table.append(String(format: "the container adds %.3f ms a launch (first launch, which makes it: %.1f ms); bound: %@",
                            (with - without) * 1000, result.firstLaunch * 1000, result.bound))
    }
}
