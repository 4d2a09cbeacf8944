import Foundation
import Testing
import TestSupport
@testable import SandboxPolicy

/// `extsandbox policy …`, run as the built binary next to the test runner.
@Suite("extsandbox policy")
struct PolicyCLITests {
    static func run(_ arguments: [String]) async throws -> Fixtures.Output {
        try await Fixtures.run([TestPaths.cli] + arguments, environment: TestPaths.environmentWithPolicies())
    }

    @Test func checkReportsEveryProblemOfEveryFileAndFails() async throws {
        let dir = try TestPaths.makePolicyDirectory("policy-cli")
        let first = dir.appendingPathComponent("first.yaml").path
        let second = dir.appendingPathComponent("second.yaml").path
        try """
            version: 1
            seccomp:
              default: kill
              allow: ["@default", opnat]
            limits:
              memory: lots
            """.write(toFile: first, atomically: true, encoding: .utf8)
        try "version: 1\nseccomp:\n  default: kill\n  allow: [\"@default\", ptrace]\n".write(toFile: second, atomically: true, encoding: .utf8)
        let out = try await Self.run(["policy", "check", first, "standard", second])
        #expect(out.status == 1)
        let lines = out.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(out.stdout)")
        #expect(lines.first == "\(first):4:23: unknown system call \"opnat\"; did you mean \"openat\"?")
        #expect(lines.dropFirst().first?.hasPrefix("\(first):6:11: bad value \"lots\" for memory") == true)
        let standard = try PolicyLoader.load(file: TestPaths.standardPolicyPath)
        let instructions = try standard.compileSeccompFilter(mode: .supervised).instructionCount
        let named = Set(standard.seccomp.rules.map(\.syscall)).count
        #expect(lines.dropFirst(2).first?.hasSuffix("standard.yaml: ok (default kill, \(named) system calls named, \(instructions) BPF instructions)") == true, "\(lines)")
        #expect(lines.last?.hasPrefix("\(second):4:23: ptrace is a dangerous system call") == true)
        #expect(out.stderr.contains("2 of 3 policies have problems"))
    }

    @Test func checkOfTheShippedLevelsSucceeds() async throws {
        let out = try await Self.run(["policy", "check", "standard", "restricted", "hardened"])
        #expect(out.status == 0, "\(out.stdout)\(out.stderr)")
        #expect(out.stdout.split(separator: "\n").count == 3)
        #expect(out.stdout.split(separator: "\n").allSatisfy { $0.contains(".yaml: ok (default kill") })
    }

    /// `policy show --json`: the same resolved policy as the report, with the documented fields.
    @Test func showJSONHasTheDocumentedFields() async throws {
        let out = try await Self.run(["policy", "show", "--json", "standard"])
        #expect(out.status == 0, "\(out.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(out.stdout.utf8)) as? [String: Any])
        let standard = try PolicyLoader.load(file: TestPaths.standardPolicyPath)
        #expect(Set(object.keys) == ["name", "description", "file", "madeFrom", "seccomp", "filesystem", "network", "environment",
                                     "limits", "filterInstructions"], "\(object.keys)")
        #expect(object["name"] as? String == "standard" && object["network"] as? String == "none")
        #expect(object["file"] as? String == TestPaths.standardPolicyPath)
        #expect(object["filterInstructions"] as? Int == (try standard.compileSeccompFilter(mode: .supervised).instructionCount))
        let seccomp = try #require(object["seccomp"] as? [String: Any])
        #expect(seccomp["default"] as? String == "kill" && seccomp["execAfterStart"] as? Bool == true)
        let rules = try #require(seccomp["rules"] as? [[String: Any]])
        #expect(rules.count == standard.seccomp.rules.count)
        func rule(_ name: String) -> [String: Any]? { rules.first { $0["syscall"] as? String == name } }
        #expect(rule("clone")?["when"] as? [String] == ["arg0 & 0x7e020080 == 0"] && rule("clone")?["action"] as? String == "allow")
        #expect(rule("ptrace")?["action"] as? String == "kill" && rule("read")?["when"] as? [String] == [])
        let names = rules.compactMap { $0["syscall"] as? String }
        #expect(names == names.sorted(), "sorted by system call")
        let mounts = try #require((object["filesystem"] as? [String: Any])?["mounts"] as? [[String: Any]])
        #expect(mounts.contains { $0["kind"] as? String == "ro-bind" && $0["source"] as? String == "/usr" && $0["destination"] as? String == "/usr" })
        #expect(mounts.contains { $0["kind"] as? String == "tmpfs" && $0["destination"] as? String == "/tmp" && $0["sizeBytes"] as? Int == 256 << 20 })
        #expect((object["environment"] as? [String: Any])?["pass"] as? [String] == ["PATH", "LANG", "LC_ALL", "TERM"])
        let limits = try #require(object["limits"] as? [String: Any])
        #expect(limits["memoryBytes"] as? Int == 1 << 30 && limits["memoryScope"] as? String == "sandbox", "\(limits)")
    }

    @Test func showStandard() async throws {
        let out = try await Self.run(["policy", "show", "standard"])
        #expect(out.status == 0, "\(out.stderr)")
        let text = out.stdout
        #expect(text.hasPrefix("# standard: Ordinary programs: shells and pipelines"))
        let standard = try PolicyLoader.load(file: TestPaths.standardPolicyPath)
        let supervised = try standard.compileSeccompFilter(mode: .supervised).instructionCount
        let inKernel = try standard.compileSeccompFilter(mode: .inKernel).instructionCount
        #expect(text.contains("# filter:    \(supervised) BPF instructions as the supervisor loads it; \(inKernel) for the kernel alone"))
        #expect(text.contains("  default:          kill  (every system call not listed below)"))
        #expect(text.contains("  clone                    allow         if arg0 & 0x7e020080 == 0\n"))
        #expect(text.contains("  ioctl                    errno EPERM   if arg1 & 0xffffffff == 0x5412\n"))
        #expect(text.contains("  ptrace                   kill\n"))
        #expect(text.contains("  read                     allow\n"))
        #expect(text.contains("  ro-bind             /usr\n"))
        #expect(text.contains("  tmpfs               /tmp (256M)\n"))
        #expect(text.contains("network:            none"))
        #expect(text.contains("  pass:             PATH LANG LC_ALL TERM\n"))
        #expect(text.contains("  memory:           1G\n"))
        // Sorted by name, like systemd-analyze syscall-filter.
        let names = text.split(separator: "\n").filter { $0.hasPrefix("  ") && $0.count > 3 && $0.dropFirst(2).first != " " }
            .map { $0.dropFirst(2).split(separator: " ").first.map(String.init) ?? "" }
            .filter { Syscalls.number(of: $0) != nil }
        #expect(names == names.sorted() && names.count > 300)
    }

    @Test func showRestrictedSaysWhoDecidesExec() async throws {
        let out = try await Self.run(["policy", "show", "restricted"])
        #expect(out.status == 0, "\(out.stderr)")
        #expect(out.stdout.contains("exec after start: no: the supervisor lets the sandbox's own launch through"))
        #expect(out.stdout.contains("  execve                   kill          after the launch (the supervisor decides)\n"))
        #expect(out.stdout.contains("  socket                   errno EPERM\n"))
    }

    @Test func listShowsTheSearchPathAndEveryLevel() async throws {
        let out = try await Self.run(["policy", "list"])
        #expect(out.status == 0, "\(out.stderr)")
        let policies = TestPaths.policiesDirectory
        #expect(out.stdout.contains("  1. \(policies)  (the install's policies)"))
        #expect(out.stdout.contains("  2. /etc/extsandbox/policies  (the admin's policies"))
        for level in ["standard", "restricted", "hardened"] {
            #expect(out.stdout.contains(level.padding(toLength: 12, withPad: " ", startingAt: 0)), "\(level)")
        }
    }

    @Test func importDockerWritesALoadablePolicy() async throws {
        let dir = try TestPaths.makePolicyDirectory("policy-cli")
        let json = TestPaths.dockerSampleProfile
        let out = try await Self.run(["policy", "import-docker", json])
        #expect(out.status == 0, "\(out.stderr)")
        #expect(out.stdout.hasPrefix("# Imported from the OCI seccomp profile \(json)"))
        #expect(out.stderr.contains("warning: syscalls[10] (sync) skipped: action SCMP_ACT_NOTIFY has no equivalent"))
        let yaml = dir.appendingPathComponent("imported.yaml").path
        try out.stdout.write(toFile: yaml, atomically: true, encoding: .utf8)
        let check = try await Self.run(["policy", "check", yaml])
        #expect(check.status == 0, "\(check.stdout)")
    }

    @Test func helpTeaches() async throws {
        let out = try await Self.run(["policy", "check", "--help"])
        #expect(out.status == 0)
        #expect(out.stdout.contains("FILE:LINE:COLUMN: message"))
        #expect(out.stdout.contains("extsandbox policy check standard"))
    }
}
