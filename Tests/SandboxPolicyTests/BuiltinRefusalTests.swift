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

    @Test("device nodes fail with EPERM in mknod and mknodat; FIFOs, sockets and files stay the policy's")
    func deviceNodes() throws {
        let filter = try Self.allowEverything.compileSeccompFilter(mode: .inKernel)
        for (name, index) in [("mknod", 1), ("mknodat", 2)] {
            func with(_ mode: UInt64) -> [UInt64] {
                var args = [UInt64](repeating: 0, count: 6)
                args[index] = mode
                return args
            }
            // S_IFCHR (a 0:0 one is a whiteout), S_IFBLK; the kernel reads a umode_t.
            for mode: UInt64 in [0o020000, 0o020644, 0o060600, 0xffff_ffff_0000_0000 | 0o020000, 0x1_0000_0000 | 0o060644] {
                #expect(Self.eval(filter, name, with(mode)) == Self.eperm, "\(name) mode 0x\(String(mode, radix: 16))")
            }
            for mode: UInt64 in [0, 0o644, 0o100644, 0o010644, 0o140755, 0x0002_0000_0000 | 0o100644] {
                #expect(Self.eval(filter, name, with(mode)) == Self.allow, "\(name) mode 0x\(String(mode, radix: 16))")
            }
        }
    }

    @Test("renameat2 with RENAME_WHITEOUT fails with EPERM; its other flags stay the policy's")
    func renameWhiteout() throws {
        let filter = try Self.allowEverything.compileSeccompFilter(mode: .inKernel)
        for flags: UInt64 in [4, 5, 6, 0xffff_ffff, 0xdead_beef_0000_0004] {
            #expect(Self.eval(filter, "renameat2", [0, 0, 0, 0, flags]) == Self.eperm, "flags 0x\(String(flags, radix: 16))")
        }
        for flags: UInt64 in [0, 1, 2, 0x4_0000_0000] {
            #expect(Self.eval(filter, "renameat2", [0, 0, 0, 0, flags]) == Self.allow, "flags 0x\(String(flags, radix: 16))")
        }
        // rename and renameat have no flags.
        #expect(Self.eval(filter, "renameat", [0, 0, 0, 0, 4]) == Self.allow)
    }

    @Test("no shipped level lets a device node or a whiteout be made", arguments: ["standard", "restricted", "hardened"])
    func shippedLevelsRefuseDeviceNodes(level: String) throws {
        let policy = try PolicyLoader.load(file: packageRoot.appendingPathComponent("Policies/\(level).yaml").path)
        // Levels that forbid a later exec compile only for the supervisor.
        for mode in policy.seccomp.allowExecAfterStart ? [FilterMode.inKernel, .supervised] : [.supervised] {
            let filter = try policy.compileSeccompFilter(mode: mode)
            for (name, args) in [("mknod", [0, 0o020000]), ("mknodat", [0, 0, 0o020644]), ("mknodat", [0, 0, 0o060644]),
                                 ("renameat2", [0, 0, 0, 0, 4])] as [(String, [UInt64])] {
                let answer = Self.eval(filter, name, args)
                #expect(!BuiltinRefusals.runs(answer), "\(level) (\(mode)) lets \(name)(\(args)) run: 0x\(String(answer, radix: 16))")
            }
        }
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
                - syscall: mknodat
                  action: allow
                  when: ["arg2 & S_IFMT == S_IFCHR"]
                - syscall: renameat2
                  action: allow
                  when: ["arg4 & RENAME_WHITEOUT == RENAME_WHITEOUT"]
                - syscall: mknodat
                  action: allow
                  when: ["arg2 & S_IFMT == S_IFIFO"]
            """
        let found = problems(yaml)
        #expect(found.count == 4, "\(found)")
        #expect(found.first?.line == 6, "\(found)")
        #expect(found.first?.message.contains("S_ISUID or S_ISGID") == true, "\(found)")
        #expect(found.dropFirst().first?.line == 9, "\(found)")
        #expect(found.dropFirst().first?.message.contains("ENOSYS") == true, "\(found)")
        #expect(found.dropFirst(2).first?.line == 11, "\(found)")
        #expect(found.dropFirst(2).first?.message.contains("device node") == true, "\(found)")
        #expect(found.dropFirst(3).first?.line == 14, "\(found)")
        #expect(found.dropFirst(3).first?.message.contains("RENAME_WHITEOUT") == true, "\(found)")
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
            // No whiteout (a 0:0 character device), by renameat2 or by mknod.
            let whiteout = path + "w"
            guard path.withCString({ from in whiteout.withCString { to in
                xsb_raw_syscall6(316, UInt(bitPattern: -100), UInt(bitPattern: from), UInt(bitPattern: -100), UInt(bitPattern: to), 4, 0)
            } }) == -1, errno == EPERM else { exit(16) }
            guard mknod(whiteout, S_IFCHR | 0o644, 0) == -1, errno == EPERM else { exit(17) }
            guard mknod(path + "p", S_IFIFO | 0o644, 0) == 0 else { exit(18) }
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, lstat(whiteout, &info) == -1 else { exit(19) }
            unlink(path + "p")
            unlink(path)
            rmdir(dir)
            exit(0)
        }
    }
}
#endif
