#if os(Linux)
import CSeccomp
import Foundation
import Glibc
import Testing
@testable import SandboxPolicy
import TestSupport

/// The refusals every compiled filter carries (setuid/setgid mode bits, openat2, nested filters),
/// read through the BPF interpreter and, for one filter, in a real process.
@Suite("Built-in refusals in every filter", .offThePool)
struct BuiltinRefusalTests {
    static let eperm = SeccompReturn.errno | 1
    static let eacces = SeccompReturn.errno | 13
    static let enosys = SeccompReturn.errno | 38
    static let allow = SeccompReturn.allow

    /// A policy that lets everything run (but the dangerous calls it must name).
    static let allowEverything = Policy(name: "allow-all", seccomp: SeccompPolicy(defaultAction: .allow))

    static func eval(_ filter: CompiledSeccompFilter, _ name: String, _ args: [UInt64]) -> UInt32 {
        filter.evaluate(syscall: Syscalls.number(of: name) ?? (name == "fchmodat2" ? 452 : -1), arguments: args)
    }

    @Test("setuid and setgid bits fail with EPERM in every mode-taking call, whatever the upper 32 bits hold")
    func setIDModes() throws {
        let filter = try Self.allowEverything.compileSeccompFilter(mode: .inKernel)
        let calls: [(String, Int)] = [
            ("chmod", 1), ("fchmod", 1), ("fchmodat", 2), ("fchmodat2", 2), ("open", 2), ("openat", 3),
            ("creat", 1), ("mkdir", 1), ("mkdirat", 2), ("mknod", 1), ("mknodat", 2),
        ]
        for (name, index) in calls {
            func with(_ mode: UInt64) -> [UInt64] {
                var args = [UInt64](repeating: 0, count: 6)
                args[index] = mode
                return args
            }
            for mode: UInt64 in [0o4755, 0o2755, 0o6755, 0o4000, 0o100_4755, 0xdead_beef_0000_0000 | 0o4755, 0xffff_ffff_0000_0000 | 0o2000] {
                #expect(Self.eval(filter, name, with(mode)) == Self.eperm, "\(name) mode 0x\(String(mode, radix: 16))")
            }
            for mode: UInt64 in [0, 0o755, 0o1777, 0o100_644, 0xffff_ffff_0000_0000 | 0o755, 0x0000_0800_0000_0000] {
                #expect(Self.eval(filter, name, with(mode)) == Self.allow, "\(name) mode 0x\(String(mode, radix: 16))")
            }
        }
    }

    @Test("openat2 fails with ENOSYS; nested filters fail with EPERM; strict mode and queries stay the policy's")
    func openat2AndNestedFilters() throws {
        let filter = try Self.allowEverything.compileSeccompFilter(mode: .inKernel)
        #expect(Self.eval(filter, "openat2", [0, 0, 0, 24]) == Self.enosys)
        #expect(Self.eval(filter, "seccomp", [1, 0, 0]) == Self.eperm)  // SECCOMP_SET_MODE_FILTER
        #expect(Self.eval(filter, "seccomp", [0xffff_0000_0000_0001, 8, 0]) == Self.eperm)  // the kernel reads an unsigned int
        #expect(Self.eval(filter, "seccomp", [0, 0, 0]) == Self.allow)  // SECCOMP_SET_MODE_STRICT
        #expect(Self.eval(filter, "seccomp", [2, 0, 0]) == Self.allow)  // SECCOMP_GET_ACTION_AVAIL
        #expect(Self.eval(filter, "prctl", [22, 2, 0]) == Self.eperm)  // PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        #expect(Self.eval(filter, "prctl", [22, 0x1_0000_0001, 0]) == Self.eperm)
        #expect(Self.eval(filter, "prctl", [22, 1, 0]) == Self.allow)  // SECCOMP_MODE_STRICT
        #expect(Self.eval(filter, "prctl", [21, 0, 0]) == Self.allow)  // PR_GET_SECCOMP
        #expect(Self.eval(filter, "prctl", [15, 0, 0]) == Self.allow)  // PR_SET_NAME
    }

    @Test("a policy's kill and errno stay stronger than the built-ins")
    func policyStaysStronger() throws {
        let policy = try PolicyLoader.load(yaml: """
            version: 1
            seccomp:
              default: allow
              kill: [chmod, openat2, modify_ldt, "@debug", "@mount", "@module", "@reboot", "@swap", "@keyring", "@raw-io", bpf, userfaultfd, io_uring_setup, io_uring_enter, io_uring_register, open_by_handle_at, open_tree, unshare, setns, acct, process_vm_readv, process_vm_writev, kcmp]
              errno: { EACCES: [fchmod, seccomp] }
            """, name: "t")
        for mode in [FilterMode.inKernel, .supervised] {
            let filter = try policy.compileSeccompFilter(mode: mode)
            let kill = mode == .inKernel ? SeccompReturn.killProcess : SeccompReturn.userNotif
            #expect(Self.eval(filter, "chmod", [0, 0o4755]) == kill)
            #expect(Self.eval(filter, "openat2", [0, 0, 0, 24]) == kill)
            #expect(Self.eval(filter, "fchmod", [3, 0o4755]) == Self.eacces)
            #expect(Self.eval(filter, "seccomp", [1, 0, 0]) == Self.eacces)
            #expect(Self.eval(filter, "fchmodat", [0, 0, 0o4755]) == Self.eperm)
        }
    }

    @Test("hardened's openat rules still decide; mode bits are refused only where openat would run")
    func hardenedOpenat() throws {
        let policy = try PolicyLoader.load(file: packageRoot.appendingPathComponent("Policies/hardened.yaml").path)
        let filter = try policy.compileSeccompFilter(mode: .supervised)
        let oCreat: UInt64 = 0x40
        #expect(Self.eval(filter, "openat", [0, 0, 0, 0]) == Self.allow)  // read-only
        #expect(Self.eval(filter, "openat", [0, 0, oCreat, 0o644]) == Self.eacces)  // the policy's own errno
        #expect(Self.eval(filter, "openat", [0, 0, oCreat, 0o4755]) == Self.eacces)
        #expect(Self.eval(filter, "openat", [0, 0, 0, 0o4000]) == Self.eperm)
    }

    @Test("a rule that would let a call set setuid bits, or let openat2 run, is an error at its line")
    func ineffectiveRules() {
        let yaml = """
            version: 1
            seccomp:
              default: kill
              allow: ["@default", "@basic-io"]
              rules:
                - syscall: chmod
                  action: allow
                  when: ["arg1 & S_ISUID == S_ISUID"]
                - syscall: openat2
                  action: allow
            """
        let found = problems(yaml)
        #expect(found.count == 2, "\(found)")
        #expect(found.first?.line == 6, "\(found)")
        #expect(found.first?.message.contains("S_ISUID or S_ISGID") == true, "\(found)")
        #expect(found.last?.line == 9, "\(found)")
        #expect(found.last?.message.contains("ENOSYS") == true, "\(found)")
    }

    @Test("the kernel takes the rewritten filter and refuses what it says", .timeLimit(.minutes(1)), .oneExitTestAtATime)
    func inARealProcess() async throws {
        await #expect(processExitsWith: .success) {
            var template = Array("/tmp/xsb-builtin-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { exit(80) }
            let dir = String(cString: made)
            let path = dir + "/f"
            let fd = open(path, O_CREAT | O_WRONLY, 0o644)
            guard fd >= 0 else { exit(81) }
            close(fd)
            guard let filter = try? BuiltinRefusalTests.allowEverything.compileSeccompFilter(mode: .inKernel) else { exit(90) }
            let rc = filter.program.withUnsafeBytes { xsb_install_seccomp_program($0.baseAddress, $0.count) }
            guard rc == 0 else { exit(92) }
            guard chmod(path, 0o4755) == -1, errno == EPERM else { exit(10) }
            guard chmod(path, 0o755) == 0 else { exit(11) }
            guard mkdir(path + "d", 0o2755) == -1, errno == EPERM else { exit(12) }
            guard open(path + "n", O_CREAT | O_WRONLY, 0o4755) == -1, errno == EPERM else { exit(13) }
            guard xsb_raw_syscall6(437, UInt(bitPattern: -100), 0, 0, 24, 0, 0) == -1, errno == ENOSYS else { exit(14) }
            guard xsb_raw_syscall6(157, 22, 2, 0, 0, 0, 0) == -1, errno == EPERM else { exit(15) }
            unlink(path)
            rmdir(dir)
            exit(0)
        }
    }
}
#endif
