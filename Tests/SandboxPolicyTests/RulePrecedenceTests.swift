#if os(Linux)
import CSeccomp
import Foundation
import Glibc
import Testing
import TestSupport
@testable import SandboxPolicy

/// getpid decided by four overlapping rules with different actions; no match falls back to the
/// default, kill. getpid ignores its arguments, so the filter alone decides what a call returns.
let overlappingRulesPolicy = getpidPolicy(
    "{ syscall: getpid, action: allow, when: \"arg0 < 100\" }",
    "{ syscall: getpid, action: errno EACCES, when: \"arg0 == 5\" }",
    "{ syscall: getpid, action: errno EPERM, when: [\"arg1 & 0xff == 0x10\"] }",
    "{ syscall: getpid, action: log, when: \"arg2 > 7\" }")

/// `minimalPolicy` (default kill) with these rules, one YAML flow mapping each.
func minimalPolicy(rules: String...) -> String {
    minimalPolicy + "\n  rules:\n" + rules.map { "    - \($0)\n" }.joined()
}

/// getpid decided by `rules` alone (it is removed from the allow list), and `action` as the default.
func getpidPolicy(default action: String = "kill", _ rules: String...) -> String {
    "version: 1\nseccomp:\n  default: \(action)\n  allow: [\"@default\", \"@basic-io\", \"~getpid\"]\n  rules:\n"
        + rules.map { "    - \($0)\n" }.joined()
}

/// The precedence of several conditional rules of one system call: the first whose conditions
/// hold, strongest action first (kill, errno, log, allow), equally strong ones in policy order.
@Suite("Several actions per system call", .offThePool)
struct RulePrecedenceTests {
    static func filter(_ yaml: String = overlappingRulesPolicy, mode: FilterMode = .inKernel) throws -> CompiledSeccompFilter {
        try PolicyLoader.load(yaml: yaml, name: "t").compileSeccompFilter(mode: mode)
    }

    @Test func theStrongestMatchingRuleWinsThenPolicyOrder() throws {
        let getpid = Syscalls.number(of: "getpid")!
        for mode in [FilterMode.inKernel, .supervised] {
            let f = try Self.filter(mode: mode)
            func eval(_ args: [UInt64]) -> UInt32 { f.evaluate(syscall: getpid, arguments: args) }
            let kill = mode == .inKernel ? SeccompReturn.killProcess : SeccompReturn.userNotif
            #expect(eval([5, 0x10, 0]) == SeccompReturn.errno | 13)  // EACCES: written before EPERM
            #expect(eval([6, 0x110, 0]) == SeccompReturn.errno | 1)  // EPERM beats allow
            #expect(eval([6, 0, 9]) == SeccompReturn.log)  // log beats allow
            #expect(eval([5, 0, 9]) == SeccompReturn.errno | 13)  // errno beats log
            #expect(eval([6, 0, 0]) == SeccompReturn.allow)
            #expect(eval([200, 0, 8]) == SeccompReturn.log)
            #expect(eval([200, 0, 7]) == kill)  // no rule: the default
            #expect(eval([0x1_0000_0005, 0, 0]) == kill)  // 64-bit comparisons
        }
    }

    @Test func theFilterAgreesWithThePrecedenceEverywhere() throws {
        let policy = try PolicyLoader.load(yaml: overlappingRulesPolicy, name: "t")
        let rules = policy.seccomp.rules.filter { $0.syscall == "getpid" }
        #expect(rules.map(\.action) == [.errno(13), .errno(1), .log, .allow], "the model lists them in the order they are tried")
        let f = try policy.compileSeccompFilter(mode: .inKernel)
        var generator = SystemRandomNumberGenerator()
        let interesting: [UInt64] = [0, 5, 6, 7, 8, 9, 99, 100, 101, 0x10, 0x110, 0xff10, 0x1_0000_0005, .max]
        for _ in 0..<500 {
            let args = (0..<6).map { _ in Bool.random(using: &generator) ? interesting.randomElement(using: &generator)! : UInt64.random(in: 0...UInt64.max, using: &generator) }
            let want = RulePrecedence.decide(rules, fallback: .killProcess, arguments: args)
            let expected: UInt32 = switch want {
            case .allow: SeccompReturn.allow
            case .log: SeccompReturn.log
            case .errno(let e): SeccompReturn.errno | UInt32(e)
            case .killProcess: SeccompReturn.killProcess
            }
            #expect(f.evaluate(syscall: Syscalls.number(of: "getpid")!, arguments: args) == expected, "getpid\(args)")
        }
    }

    @Test func everyComparisonCompilesExactly() throws {
        // Two actions force the compiler's own rule chain; each operator at its 64-bit edges.
        let operators = ["==", "!=", "<", "<=", ">", ">="]
        let values: [UInt64] = [0, 0xffff_ffff, 0x1_0000_0001, 0xffff_ffff_0000_0000, .max]
        for op in operators {
            for value in values {
                let yaml = getpidPolicy(
                    "{ syscall: getpid, action: errno EPERM, when: \"arg3 \(op) \(value)\" }",
                    "{ syscall: getpid, action: allow, when: \"arg4 & 0xffff00000000ff00 == 0x1234000000001200\" }")
                let f = try Self.filter(yaml)
                let condition = try ConditionParser.parse("arg3 \(op) \(value)")
                for probe in values + [value &- 1, value &+ 1, 0x8000_0000, 0x7fff_ffff] {
                    for masked: UInt64 in [0x1234_0000_0000_1200, 0x1234_0000_0000_1300, 0x1235_0000_0000_1200, 0x1234_5678_0000_12ff] {
                        let want: UInt32 = condition.holds(for: probe) ? SeccompReturn.errno | 1
                            : masked & 0xffff_0000_0000_ff00 == 0x1234_0000_0000_1200 ? SeccompReturn.allow : SeccompReturn.killProcess
                        let got = f.evaluate(syscall: Syscalls.number(of: "getpid")!, arguments: [0, 0, 0, probe, masked])
                        #expect(got == want, "arg3 \(op) \(value) at arg3 = \(probe), arg4 = \(masked)")
                    }
                }
            }
        }
    }

    @Test func aConditionalRuleMayUseTheDefaultAction() throws {
        // Before several actions per call, this was refused (libseccomp cannot express it).
        let f = try Self.filter(minimalPolicy(rules: "{ syscall: kill, action: allow }", "{ syscall: kill, action: kill, when: \"arg1 == 9\" }"))
        let nr = Syscalls.number(of: "kill")!
        #expect(f.evaluate(syscall: nr, arguments: [1, 9]) == SeccompReturn.killProcess)
        #expect(f.evaluate(syscall: nr, arguments: [1, 15]) == SeccompReturn.allow)
    }

    @Test func rulesFromSeveralFilesCombineByPrecedence() throws {
        let tree = try PolicyTree([
            "base.yaml": minimalPolicy(rules: "{syscall: kill, action: errno EPERM, when: \"arg1 == 15\"}"),
            "a.yaml": "version: 1\nextends: ./base.yaml\nseccomp:\n  rules:\n    - {syscall: kill, action: log, when: \"arg0 == 1\"}\n",
        ])
        let f = try tree.load("a.yaml").compileSeccompFilter(mode: .inKernel)
        let nr = Syscalls.number(of: "kill")!
        #expect(f.evaluate(syscall: nr, arguments: [1, 15]) == SeccompReturn.errno | 1)
        #expect(f.evaluate(syscall: nr, arguments: [1, 9]) == SeccompReturn.log)
        #expect(f.evaluate(syscall: nr, arguments: [2, 9]) == SeccompReturn.killProcess)
    }

    @Test func aRuleShadowedByTheFallbackStillHasNoEffect() {
        // EPERM when arg0 == 5 matters only where it overrides a weaker rule; with none, it is
        // what the call gets anyway.
        let found = problems(getpidPolicy(default: "errno EPERM", "{ syscall: getpid, action: errno EPERM, when: \"arg0 == 5\" }"))
        #expect(found.map(\.message) == ["this rule has no effect: getpid is already failing with EPERM by the default action"])
        let meaningful = problems(getpidPolicy(default: "errno EPERM", "{ syscall: getpid, action: errno EPERM, when: \"arg0 == 5\" }",
                                               "{ syscall: getpid, action: allow, when: \"arg0 < 10\" }"))
        #expect(meaningful.isEmpty, "\(meaningful)")
    }

    @Test func theBuiltInRefusalsStillApplyToRuleChains() throws {
        // chmod allowed under one condition, failed under another: a setuid mode still fails.
        let f = try Self.filter(minimalPolicy(rules: "{ syscall: chmod, action: allow, when: \"arg1 < 0x1000\" }",
                                              "{ syscall: chmod, action: errno EACCES, when: \"arg1 & 2 == 2\" }"))
        let nr = Syscalls.number(of: "chmod")!
        #expect(f.evaluate(syscall: nr, arguments: [0, 0o755]) == SeccompReturn.allow)
        #expect(f.evaluate(syscall: nr, arguments: [0, 0o4755]) == SeccompReturn.errno | 1)  // setuid: built in
        #expect(f.evaluate(syscall: nr, arguments: [0, 0o757]) == SeccompReturn.errno | 13)
        #expect(f.evaluate(syscall: nr, arguments: [0, 0x2000]) == SeccompReturn.killProcess)
    }

    /// The kernel, not only the interpreter, answers as the precedence says.
    @Test(.oneExitTestAtATime) func theKernelAnswersByPrecedence() async {
        await #expect(processExitsWith: .signal(SIGSYS)) {
            guard let policy = try? PolicyLoader.load(yaml: overlappingRulesPolicy, name: "t"),
                let filter = try? policy.compileSeccompFilter(mode: .inKernel)
            else { exit(90) }
            let getpid = Int(Syscalls.number(of: "getpid")!)
            let pid = Int(Glibc.getpid())
            let rc = filter.program.withUnsafeBytes { xsb_install_seccomp_program($0.baseAddress, $0.count) }
            if rc != 0 { exit(91) }
            func call(_ a: UInt, _ b: UInt, _ c: UInt) -> Int {
                let r = xsb_raw_syscall6(getpid, a, b, c, 0, 0, 0)
                return r < 0 ? -Int(errno) : r
            }
            guard call(5, 0x10, 0) == -Int(EACCES) else { exit(1) }
            guard call(6, 0x110, 0) == -Int(EPERM) else { exit(2) }
            guard call(6, 0, 9) == pid else { exit(3) }  // log: runs
            guard call(6, 0, 0) == pid else { exit(4) }
            guard call(5, 0, 9) == -Int(EACCES) else { exit(5) }
            _ = call(200, 0, 0)  // no rule: the default kills
            exit(6)
        }
    }
}
#endif
