import Testing
@testable import SandboxPolicy
import TestSupport

/// `seccomp.memory-deny-write-execute` in policy files (issue 9, item 5); the kernel side is in
/// SandboxRuntimeTests (PolicyLevelTests).
@Suite("memory-deny-write-execute", .offThePool)
struct MemoryDenyWriteExecuteTests {
    static func level(_ name: String) throws -> Policy {
        try PolicyLoader.load(file: packageRoot.appendingPathComponent("Policies/\(name).yaml").path)
    }

    @Test("hardened sets it; standard and restricted do not (policy show: PolicyToolsTests)")
    func shippedLevels() throws {
        #expect(try Self.level("hardened").seccomp.memoryDenyWriteExecute)
        #expect(try !Self.level("standard").seccomp.memoryDenyWriteExecute)
        #expect(try !Self.level("restricted").seccomp.memoryDenyWriteExecute)
    }

    @Test("true or false, the last file that sets it wins, and it defaults to false")
    func parsing() throws {
        let on = try PolicyLoader.load(yaml: minimalPolicy + "\n  memory-deny-write-execute: true\n", name: "t")
        #expect(on.seccomp.memoryDenyWriteExecute)
        let off = try PolicyLoader.load(yaml: minimalPolicy + "\n  memory-deny-write-execute: false\n", name: "t")
        #expect(!off.seccomp.memoryDenyWriteExecute)
        #expect(try !PolicyLoader.load(yaml: minimalPolicy, name: "t").seccomp.memoryDenyWriteExecute)
        let hardened = packageRoot.appendingPathComponent("Policies/hardened.yaml").path
        let weakened = try PolicyLoader.load(yaml: "version: 1\nextends: \(hardened)\nseccomp:\n  memory-deny-write-execute: false\n", name: "t")
        #expect(!weakened.seccomp.memoryDenyWriteExecute)
        let kept = try PolicyLoader.load(yaml: "version: 1\nextends: \(hardened)\nlimits:\n  memory: 256M\n", name: "t")
        #expect(kept.seccomp.memoryDenyWriteExecute)
    }
}
