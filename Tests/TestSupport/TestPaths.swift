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

    /// The checkout's test fixtures (Tests/Fixtures: sources of fixture executables, scripts).
    public static let fixturesDirectory: String = packageRoot.appendingPathComponent("Tests/Fixtures").path

    /// A small Docker/OCI seccomp profile in the shape of moby's default one, for the import-docker
    /// tests of the importer and of the CLI (Tests/Fixtures/docker-seccomp/moby-style-sample.json).
    public static var dockerSampleProfile: String { fixturesDirectory + "/docker-seccomp/moby-style-sample.json" }

    /// The shipped standard policy of the checkout.
    public static var standardPolicyPath: String { policiesDirectory + "/standard.yaml" }

    /// The directory of the package's built executables (the CLI, fixtures, examples): SwiftPM puts
    /// them next to the test runner, or (on some layouts, where the runner sits inside a .xctest
    /// bundle) in the nearest ancestor directory that holds the `extsandbox` executable.
    public static let productsDirectory: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let runnerDirectory = URL(fileURLWithPath: exe).deletingLastPathComponent()
        var url = runnerDirectory
        while url.path != "/" {
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("extsandbox").path) { return url.path }
            url = url.deletingLastPathComponent()
        }
        return runnerDirectory.path
    }()

    /// A built executable of the package (a product name, e.g. "xsb-echo-extension").
    public static func product(_ name: String) -> String { productsDirectory + "/" + name }

    /// A fresh directory under /tmp that root and nobody (65534) may both write (mode 0777).
    public static func directoryForEitherCaller(_ label: String = "scratch") throws -> String {
        var template = Array("/tmp/xsb-\(label)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        let path = String(cString: made)
        chmod(path, 0o777)
        return path
    }

    /// The built `extsandbox` CLI (a debug build, dynamically linked against the Swift runtime).
    public static var cli: String { product("extsandbox") }

    /// The probe fixture (Tests/Fixtures/xsb-probe): tries one forbidden thing per invocation.
    public static var probe: String { product("xsb-probe") }

    /// The echo extension fixture (Tests/Fixtures/xsb-echo-extension), built with the SDK.
    public static var echoExtension: String { product("xsb-echo-extension") }
}
