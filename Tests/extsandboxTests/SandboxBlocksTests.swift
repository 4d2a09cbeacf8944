import Foundation
@testable import extsandbox
import SandboxPolicy
import Testing
import TestSupport

/// `extsandbox test`'s table of what the sandbox blocks: each row has its counts and values as
/// fields for `--json`, not only the sentence the table shows.
@Suite("extsandbox test: what the sandbox blocks")
struct SandboxBlocksTests {
    static func blocks(_ policy: String) throws -> [ConformanceReport.Block] {
        SandboxBlocks.table(for: try PolicyLoader.load(file: TestPaths.policiesDirectory + "/\(policy).yaml"))
    }

    @Test("a syscall group's row counts its calls by action, and the counts add up to the group")
    func groupCounts() throws {
        for policy in ["standard", "hardened", "restricted"] {
            let groups = try Self.blocks(policy).filter { $0.what.hasPrefix("@") }
            #expect(!groups.isEmpty, "\(policy)")
            for row in groups {
                let syscalls = try #require(row.syscalls, "\(policy) \(row.what)")
                let actions = try #require(row.actions, "\(policy) \(row.what)")
                #expect(actions.values.reduce(0, +) == syscalls, "\(policy) \(row.what): \(actions) of \(syscalls)")
                #expect(actions.keys.allSatisfy { ["kill", "allow", "log", "conditional"].contains($0) || $0.hasPrefix("errno ") },
                        "\(policy) \(row.what): \(actions)")
                // The sentence says the same counts.
                if actions.count == 1 {
                    #expect(row.sandbox.hasSuffix("(all \(syscalls))"), "\(policy) \(row.what): \(row.sandbox)")
                } else {
                    for count in actions.values { #expect(row.sandbox.contains("\(count) "), "\(policy) \(row.what): \(row.sandbox)") }
                }
            }
        }
        let mount = try #require(try Self.blocks("hardened").first { $0.what == "@mount" })
        #expect(mount.actions == ["kill": mount.syscalls!] && mount.sandbox == "killed (all \(mount.syscalls!))")
        #expect(try Self.blocks("standard").contains { ($0.actions?.count ?? 0) > 1 }, "a group with several actions")
    }

    @Test("exec, network, file system and limits rows carry their values; the JSON has them as fields")
    func otherRows() throws {
        let rows = try Self.blocks("hardened")
        let policy = try PolicyLoader.load(file: TestPaths.policiesDirectory + "/hardened.yaml")
        let exec = try #require(rows.first { $0.what == "exec after start" })
        #expect(exec.allowed == false && exec.syscalls == nil)
        #expect(rows.first { $0.what == "network" }?.network == "none")
        let filesystem = try #require(rows.first { $0.what == "filesystem" })
        #expect(filesystem.readOnly?.contains("/usr/lib") == true && filesystem.writable == [] && filesystem.tmpfs == [],
                "\(filesystem)")
        let limits = try #require(rows.first { $0.what == "limits" })
        #expect(limits.memoryBytes == policy.limits.memoryBytes && limits.processes == policy.limits.processes
                && limits.openFiles == policy.limits.openFiles && limits.cpuSeconds == policy.limits.cpuSeconds)

        var report = ConformanceReport()
        report.blocks = rows
        let json = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(report)) as? [String: Any])
        let blocks = try #require(json["blocks"] as? [[String: Any]])
        let mount = try #require(blocks.first { $0["what"] as? String == "@mount" })
        #expect(mount["syscalls"] as? Int != nil && (mount["actions"] as? [String: Int])?["kill"] == mount["syscalls"] as? Int, "\(mount)")
        #expect(mount["allowed"] == nil && mount["memoryBytes"] == nil, "a field that does not apply is left out: \(mount)")
        #expect(blocks.first { $0["what"] as? String == "exec after start" }?["allowed"] as? Bool == false)
        #expect((blocks.first { $0["what"] as? String == "limits" }?["memoryBytes"] as? Int).map(UInt64.init) == policy.limits.memoryBytes)
    }
}
