import Foundation
import Glibc
import TestSupport
import Testing

@Suite("Filter cache of the CLI")
struct FilterCacheTests {
    @Test("a cached filter is never used once any file of the policy changed")
    func invalidatedByExtendedFile() async throws {
        let dir = try TestPaths.makePolicyDirectory("filter-cache").path
        try FileManager.default.createDirectory(atPath: dir + "/cache", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        chmod(dir + "/cache", 0o700)
        let standard = try String(contentsOfFile: Fixtures.standardPolicyPath, encoding: .utf8)
        try standard.write(toFile: dir + "/base.yaml", atomically: true, encoding: .utf8)
        try "version: 1\nextends: ./base.yaml\n".write(toFile: dir + "/child.yaml", atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_CACHE_HOME"] = dir + "/cache"
        let run = { try await Fixtures.run([Fixtures.cli, "exec", "--policy", dir + "/child.yaml", "--", Fixtures.probe, "ptrace"], environment: environment) }

        #expect(try await run().status == 159)   // compiled and cached
        #expect(try await run().status == 159)   // from the cache
        let entries = try FileManager.default.contentsOfDirectory(atPath: dir + "/cache/extsandbox")
        #expect(entries.count == 1, "\(entries)")

        // The base now lets ptrace run: the cached filter must not be used.
        let debugLine = "    - \"@debug\""
        let rulesLine = "  rules:"
        var lines = standard.components(separatedBy: "\n")
        let debug = try #require(lines.firstIndex { $0.hasPrefix(debugLine) })
        lines[debug] = "    - \"perf_event_open\""
        let rules = try #require(lines.firstIndex { $0.hasPrefix(rulesLine) })
        lines.insert("    - {syscall: ptrace, action: allow, why: \"test of the cache\"}", at: rules + 1)
        let allowing = lines.joined(separator: "\n")
        try allowing.write(toFile: dir + "/base.yaml", atomically: true, encoding: .utf8)
        let after = try await run()
        #expect(after.status == 1, "ptrace now runs (the probe calls that an escape): \(after.stdout) \(after.stderr)")
    }
}
