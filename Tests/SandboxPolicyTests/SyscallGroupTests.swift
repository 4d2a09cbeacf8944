import Testing
@testable import SandboxPolicy
import TestSupport

@Suite("Syscall groups", .offThePool)
struct SyscallGroupTests {
    @Test func hasSystemdsGroups() {
        let expected = [
            "@aio", "@basic-io", "@chown", "@clock", "@cpu-emulation", "@debug", "@file-system", "@io-event",
            "@ipc", "@keyring", "@memlock", "@module", "@mount", "@network-io", "@obsolete", "@pkey",
            "@privileged", "@process", "@raw-io", "@reboot", "@resources", "@sandbox", "@setuid", "@signal",
            "@swap", "@sync", "@system-service", "@timer", "@known", "@default",
        ]
        for name in expected {
            #expect(SyscallGroups.syscalls(in: name)?.isEmpty == false, "\(name)")
        }
        #expect(SyscallGroups.syscalls(in: "@nope") == nil)
    }

    @Test func nestedGroupsExpand() throws {
        let privileged = try #require(SyscallGroups.syscalls(in: "@privileged"))
        // @privileged includes @chown, @module, @reboot, @swap …
        for name in ["chown", "fchownat", "init_module", "reboot", "kexec_load", "swapon", "bpf", "acct"] {
            #expect(privileged.contains(name), "\(name)")
        }
        let service = try #require(SyscallGroups.syscalls(in: "@system-service"))
        for name in ["execve", "openat", "read", "clone", "ioctl", "epoll_wait", "rt_sigaction", "socket"] {
            #expect(service.contains(name), "\(name)")
        }
        #expect(!service.contains("ptrace"))
        #expect(!service.contains("mount"))
    }

    @Test func onlyNativeSyscallsAreKept() throws {
        let defaults = try #require(SyscallGroups.syscalls(in: "@default"))
        #expect(defaults.contains("mmap"))
        #expect(!defaults.contains("mmap2"))  // i386 only
        #expect(!defaults.contains("set_tls"))  // arm only
        let known = try #require(SyscallGroups.syscalls(in: "@known"))
        #expect(known.contains("ptrace") && known.contains("read") && known.count > 300)
        for name in known { #expect(Syscalls.number(of: name) != nil, "\(name)") }
    }

    @Test func syscallNamesAndNumbers() {
        #expect(Syscalls.number(of: "read") == 0)
        #expect(Syscalls.number(of: "openat") == 257)
        #expect(Syscalls.number(of: "clone3") == 435)
        #expect(Syscalls.number(of: "mmap2") == nil)
        #expect(Syscalls.number(of: "nonsense") == nil)
        #expect(Syscalls.name(of: 59) == "execve")
        #expect(Syscalls.name(of: -1) == nil)
    }

    @Test func exclusionsRemoveWhatTheListAddedSoFar() throws {
        let policy = try PolicyLoader.load(yaml: """
            version: 1
            seccomp:
              default: kill
              allow: ["@system-service", "~@process", "~@network-io", "socketpair", "~read", "~@keyring", "~@aio",
                      "~userfaultfd", "~kcmp", "~open_tree", "~process_vm_readv", "~process_vm_writev"]
            """, name: "t")
        let allowed = Set(policy.seccomp.rules.filter { $0.action == .allow }.map(\.syscall))
        #expect(allowed.contains("execve"))  // from @default
        #expect(allowed.contains("socketpair"))  // removed with @network-io, added back after
        #expect(!allowed.contains("clone") && !allowed.contains("fork") && !allowed.contains("kill"))
        #expect(!allowed.contains("socket") && !allowed.contains("connect"))
        #expect(!allowed.contains("read"))
        // clone3 is always ENOSYS, whatever the groups say.
        #expect(policy.seccomp.rules.contains(SyscallRule(syscall: "clone3", action: .errno(38), justification: PolicyParser.clone3Explanation)))
    }

    @Test func strongestListWins() throws {
        let policy = try PolicyLoader.load(yaml: """
            version: 1
            seccomp:
              default: errno EPERM
              allow: ["@default", "@basic-io", "@file-system", "~open_tree"]
              log: [getpid]
              errno: { EACCES: [chmod], ENOSYS: [clone3] }
              kill: ["@mount", getpid]
            """, name: "t")
        func action(_ name: String) -> SyscallAction? {
            policy.seccomp.rules.first { $0.syscall == name && $0.conditions.isEmpty }?.action
        }
        #expect(action("getpid") == .killProcess)
        #expect(action("chmod") == .errno(13))
        #expect(action("mount") == .killProcess)
        #expect(action("read") == .allow)
        #expect(action("clone3") == .errno(38))
    }

    @Test func suggestionsUseEditDistance() {
        #expect(Suggest.closest(to: "opnat", in: Syscalls.allNames) == "openat")
        #expect(Suggest.closest(to: "EPREM", in: PolicyConstants.errnos.keys) == "EPERM")
        #expect(Suggest.closest(to: "completelydifferent", in: ["read", "write"]) == nil)
    }
}
