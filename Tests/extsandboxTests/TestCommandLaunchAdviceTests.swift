@testable import SandboxExec
import Foundation
import Testing
import TestSupport

/// `extsandbox test`'s launch check gives the advice `run` and `exec` give for a launch that
/// failed (ErrorAdvice.extensionLaunch), by the typed cause: the sandbox's failed step here.
@Suite("extsandbox test: launch advice")
struct TestCommandLaunchAdviceTests {
    @Test func aLaunchTheSandboxRefusesGetsTheStepsAdvice() async throws {
        let bundles = try RunTestCommandTests.Bundles()
        let bundle = try bundles.echo()
        // Loads (the policy check passes), but its bind source does not exist: the launch fails
        // at the bind-mount step.
        let missing = bundles.development + "/no-such-directory"
        let policy = bundles.development + "/missing-bind.yaml"
        #expect(FileManager.default.createFile(
            atPath: policy, contents: Data("version: 1\nextends: standard\nfilesystem:\n  ro-bind: [\(missing)]\n".utf8)))
        let output = try await bundles.run(["test", bundle, "--policy", policy, "--json"])
        #expect(output.status == 1, "\(output.stdout)\(output.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
        let checks = report["checks"] as? [[String: Any]] ?? []
        #expect(checks.first { $0["name"] as? String == "policy" }?["status"] as? String == "pass", "\(checks)")
        let launch = try #require(checks.first { $0["name"] as? String == "launch and READY" }, "\(checks)")
        #expect(launch["status"] as? String == "fail", "\(launch)")
        #expect((launch["detail"] as? String)?.contains("bind source \(missing)") == true, "\(launch)")
        #expect((launch["fix"] as? String)?.hasPrefix("check that every --ro-bind/--bind source and every path the policy binds exists") == true,
                "\(launch)")
    }
}
