import Foundation
import Glibc

/// Where the tests find the checkout's files and the package's built executables.
public enum TestPaths {
    /// The checkout's root (this file is Tests/TestSupport/TestPaths.swift).
    public static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The checkout's Policies directory.
    public static let policiesDirectory: String = packageRoot.appendingPathComponent("Policies").path

    /// `environment` (by default this process's) with `EXTSANDBOX_POLICIES_DIR` naming the
    /// checkout's Policies: a program run from the build tree looks for policies by name only in
    /// its install prefix and /etc, so the tests say explicitly where the checkout's are.
    public static func environmentWithPolicies(_ environment: [String: String]? = nil) -> [String: String] {
        var environment = environment ?? ProcessInfo.processInfo.environment
        environment["EXTSANDBOX_POLICIES_DIR"] = policiesDirectory
        return environment
    }

    /// A fresh directory for policy files (and policy caches): under the checkout's `.build`, so
    /// that it passes the policy ownership checks wherever the checkout is. Mode 755, owned by the
    /// test's user, so that user `nobody` can read what the tests put there.
    public static func makePolicyDirectory(_ label: String = "policies") throws -> URL {
        let base = packageRoot.appendingPathComponent(".build/xsb-test-policies")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        chmod(base.path, 0o755)
        let url = base.appendingPathComponent("\(label)-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
        chmod(url.path, 0o755)
        return url
    }

    /// The directory of the package's executables: the nearest ancestor of the test runner's
    /// directory that holds `marker` (on some layouts the runner sits inside a .xctest bundle).
    public static func productsDirectory(containing marker: String) -> String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
        while url.path != "/" && !FileManager.default.fileExists(atPath: url.appendingPathComponent(marker).path) {
            url = url.deletingLastPathComponent()
        }
        return url.path
    }
}
