import Foundation
import Glibc
import SandboxPolicy
import Testing
import TestSupport
@testable import ExtSandbox

/// What a running extension costs its host in memory (issue 14: at most 64 KiB each).
@Suite("Host memory per extension")
struct HostMemoryTests {
    /// Each handle resolves its point's policy afresh; every running extension keeps it. Equal
    /// policies must be one copy (about 15 KiB each for `hardened` otherwise).
    @Test("extensions at one point share one copy of its resolved policy; an edited policy gets its own")
    func resolvedPolicyShared() throws {
        let first = try ProcessReuseKey(identity: HostFixtures.identity(level: "hardened"))
        let second = try ProcessReuseKey(identity: HostFixtures.identity(level: "hardened"))
        #expect(storage(of: first.policy) == storage(of: second.policy))

        // A policy file edited between two launches: not equal, not shared, and the new text is
        // what the second key holds.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-memory-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/edited.yaml"
        let original = try String(contentsOfFile: HostFixtures.policiesDirectory + "/hardened.yaml", encoding: .utf8)
        try Fixtures.writeFile(path, Array(original.utf8), mode: 0o644)
        let point = { AppExtensionPoint(name: "org.extsandbox.test", securityLevel: path) }
        let identity = {
            AppExtensionIdentity.developmentOnly(
                bundleIdentifier: "memory-\(UUID().uuidString)", executablePath: HostFixtures.productsDirectory + "/xsb-echo-extension",
                point: point())
        }
        let before = try ProcessReuseKey(identity: identity())
        try Fixtures.writeFile(path, Array(original.replacingOccurrences(
            of: "\ndescription: >-", with: "\ndescription: >-\n  Edited.").utf8), mode: 0o644)
        let after = try ProcessReuseKey(identity: identity())
        #expect(before.policy != after.policy)
        #expect(after.policy.description.hasPrefix("Edited."))
        #expect(storage(of: before.policy) != storage(of: after.policy))
    }

    private func storage(of policy: Policy) -> UnsafeRawPointer? {
        policy.seccomp.rules.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) }
    }
}
