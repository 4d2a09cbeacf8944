import Testing
@testable import SandboxPolicy
import TestSupport

@Suite("Policies/standard.yaml", .offThePool)
struct StandardPolicyTests {
    let policy: Policy

    init() throws {
        policy = try PolicyLoader.load(file: standardPolicyPath)
    }

    @Test func loadsWithoutProblems() {
        #expect(PolicyLoader.check(file: standardPolicyPath) == [])
        #expect(policy.name == "standard")
        #expect(policy.sourcePath == standardPolicyPath)
        #expect(policy.description.hasPrefix("Ordinary programs"))
        #expect(policy.network == .none)
        #expect(policy.seccomp.defaultAction == .killProcess)
    }

    @Test func filesystemEnvironmentAndLimits() {
        let mounts = policy.filesystem.mounts
        #expect(mounts.first == .bind(source: "/usr", destination: "/usr", writable: false, optional: false))
        for path in ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache"] {
            #expect(mounts.contains(.bind(source: path, destination: path, writable: false, optional: true)), "\(path)")
        }
        #expect(mounts.last == .tmpfs(destination: "/tmp", sizeBytes: 256 << 20))
        #expect(policy.environment.pass == ["PATH", "LANG", "LC_ALL", "TERM"])
        #expect(policy.environment.set == ["HOME": "/tmp"])
        #expect(policy.limits == ResourceLimits(
            memoryBytes: 1 << 30, processes: 256, cpuSeconds: 600, openFiles: 1024, fileSizeBytes: 1 << 30,
            wallClockSeconds: nil))
    }

    @Test func requiredDenials() {
        let killed = [
            "ptrace", "mount", "umount2", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
            "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
            "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
            "open_by_handle_at", "name_to_handle_at", "reboot", "swapon", "swapoff", "chroot", "pivot_root",
            "acct", "quotactl",
        ]
        let allowedUnconditionally = Set(policy.seccomp.rules.filter { $0.action == .allow && $0.conditions.isEmpty }.map(\.syscall))
        for name in killed {
            #expect(!allowedUnconditionally.contains(name), "\(name)")
        }
        #expect(allowedUnconditionally.contains("execve"))
        #expect(!allowedUnconditionally.contains("clone"))
    }

    @Test(arguments: [FilterMode.inKernel, .supervised])
    func compiles(mode: FilterMode) throws {
        let filter = try policy.compileSeccompFilter(mode: mode)
        #expect(filter.instructionCount > 10)
        #expect(filter.program.count == filter.instructionCount * 8)
        let kill = mode == .inKernel ? SeccompReturn.killProcess : SeccompReturn.userNotif
        func eval(_ name: String, _ args: [UInt64] = []) -> UInt32 {
            filter.evaluate(syscall: Syscalls.number(of: name)!, arguments: args)
        }
        let eperm = SeccompReturn.errno | 1
        #expect(eval("read") == SeccompReturn.allow)
        #expect(eval("execve") == SeccompReturn.allow)
        #expect(eval("ptrace") == kill)
        #expect(eval("mount") == kill)
        #expect(eval("unshare") == kill)
        #expect(eval("io_uring_setup") == kill)
        #expect(eval("clone3") == SeccompReturn.errno | 38)
        // clone: threads and fork are fine, namespaces are not.
        #expect(eval("clone", [0x3d0f00]) == SeccompReturn.allow)  // pthread_create's flags
        #expect(eval("clone", [0x1200011]) == SeccompReturn.allow)  // fork's flags
        for flag: UInt64 in [0x80, 0x20000, 0x0200_0000, 0x0400_0000, 0x0800_0000, 0x1000_0000, 0x2000_0000, 0x4000_0000] {
            #expect(eval("clone", [0x1200011 | flag]) == kill, "flag \(flag)")
        }
        // ioctl: TIOCSTI and TIOCLINUX fail with EPERM, also with garbage in the upper 32 bits.
        #expect(eval("ioctl", [0, 0x5412]) == eperm)
        #expect(eval("ioctl", [0, 0x1_0000_5412]) == eperm)
        #expect(eval("ioctl", [0, 0x541C]) == eperm)
        #expect(eval("ioctl", [0, 0x541B]) == SeccompReturn.allow)  // FIONREAD
        #expect(eval("ioctl", [3, 0x5401]) == SeccompReturn.allow)  // TCGETS
        // Foreign architectures are killed in the kernel, whatever the mode.
        #expect(filter.evaluate(syscall: 39, arguments: [], architecture: SeccompReturn.archI386) == SeccompReturn.killProcess)
        #expect(filter.evaluate(syscall: SeccompReturn.x32SyscallBit | 39, arguments: []) == SeccompReturn.killProcess)
    }

    @Test func compilingIsDeterministic() throws {
        #expect(try policy.compileSeccompFilter() == policy.compileSeccompFilter())
        #expect(try policy.compileSeccompFilter(mode: .inKernel) != policy.compileSeccompFilter(mode: .supervised))
    }
}

@Suite("Compiler", .offThePool)
struct CompilerTests {
    @Test func policiesBuiltInCodeAreCheckedToo() {
        let noExecve = Policy(name: "x", seccomp: SeccompPolicy(defaultAction: .killProcess, rules: [
            SyscallRule(syscall: "read", action: .allow),
        ]))
        #expect(throws: PolicyError.self) { try noExecve.compileSeccompFilter() }
        let clone3 = Policy(name: "x", seccomp: SeccompPolicy(defaultAction: .allow, rules: [
            SyscallRule(syscall: "clone3", action: .allow),
        ]))
        #expect { try clone3.compileSeccompFilter() } throws: { ($0 as? PolicyError)?.message.contains("clone3 must fail with ENOSYS") == true }
        let unknown = Policy(name: "x", seccomp: SeccompPolicy(defaultAction: .allow, rules: [
            SyscallRule(syscall: "opnat", action: .killProcess),
        ]))
        #expect { try unknown.compileSeccompFilter() } throws: { ($0 as? PolicyError)?.message.contains("did you mean \"openat\"") == true }
    }

    @Test func conditionalRulesFallBackToThePlainAction() throws {
        // Default allow; openat killed unless O_RDONLY… expressed as: errno when writing.
        let policy = Policy(name: "x", seccomp: SeccompPolicy(defaultAction: .allow, rules: [
            SyscallRule(syscall: "socket", action: .errno(97), conditions: [ArgumentCondition(index: 0, op: .notEqual, value: 1)]),
            SyscallRule(syscall: "kill", action: .log),
            SyscallRule(syscall: "kill", action: .errno(1), conditions: [ArgumentCondition(index: 1, op: .equal, value: 9)]),
            SyscallRule(syscall: "mmap", action: .killProcess, conditions: [
                ArgumentCondition(index: 2, op: .maskedEqual(mask: 6), value: 6),
                ArgumentCondition(index: 3, op: .greaterOrEqual, value: 0x20),
            ]),
        ]))
        let filter = try policy.compileSeccompFilter(mode: .inKernel)
        func eval(_ name: String, _ args: [UInt64]) -> UInt32 {
            filter.evaluate(syscall: Syscalls.number(of: name)!, arguments: args)
        }
        #expect(eval("socket", [1, 1]) == SeccompReturn.allow)
        #expect(eval("socket", [2, 1]) == SeccompReturn.errno | 97)
        #expect(eval("kill", [1, 9]) == SeccompReturn.errno | 1)
        #expect(eval("kill", [1, 15]) == SeccompReturn.log)
        #expect(eval("mmap", [0, 4096, 7, 0x22]) == SeccompReturn.killProcess)
        #expect(eval("mmap", [0, 4096, 3, 0x22]) == SeccompReturn.allow)
        #expect(eval("mmap", [0, 4096, 7, 0x2]) == SeccompReturn.allow)
        #expect(eval("read", [0]) == SeccompReturn.allow)
        #expect(eval("clone3", [0]) == SeccompReturn.errno | 38)
    }
}
