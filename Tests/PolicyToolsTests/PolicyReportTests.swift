import Testing
@testable import PolicyTools
@testable import SandboxPolicy
import TestSupport

/// What `extsandbox policy show` prints (PolicyReport).
@Suite("policy show", .offThePool)
struct PolicyReportTests {
    static func level(_ name: String) throws -> Policy {
        try PolicyLoader.load(file: packageRoot.appendingPathComponent("Policies/\(name).yaml").path)
    }

    @Test func memoryDenyWriteExecuteSaysWhichLevelsSetIt() throws {
        #expect(PolicyReport.show(try Self.level("hardened")).contains("  W^X memory:       memory-deny-write-execute: no page is writable and executable"))
        #expect(PolicyReport.show(try Self.level("standard")).contains("  W^X memory:       not enforced"))
    }

    @Test func memoryScopePerProcessIsShown() throws {
        let policy = try PolicyLoader.load(yaml: minimalPolicy + "\nlimits: { memory: 1G, memory-scope: per-process }\n", name: "t")
        #expect(PolicyReport.show(policy).contains("memory-scope:     per-process"))
    }

    @Test func conditionalRulesAreListedInTheOrderTheyAreTried() throws {
        let policy = try PolicyLoader.load(yaml: minimalPolicy + """

              rules:
                - { syscall: kill, action: allow, when: "arg1 == 15" }
                - { syscall: kill, action: errno EPERM, when: "arg0 == 1" }
            """, name: "t")
        let lines = PolicyReport.show(policy).split(separator: "\n").map(String.init)
        let start = try #require(lines.firstIndex { $0.hasPrefix("  kill ") })
        #expect(lines[start].contains("errno EPERM   if arg0 == 1"), "\(lines[start...].prefix(3))")
        #expect(lines[start + 1].contains("allow         if arg1 == 0xf"))
    }
}
