#if canImport(Glibc)
import Glibc
#endif
import CSeccomp

/// System calls of the native architecture (x86_64), by name and number, as libseccomp knows them.
public enum Syscalls {
    /// The name of a native syscall number, or `nil` if libseccomp does not know it.
    public static func name(of number: Int32) -> String? {
        guard number >= 0, let cName = seccomp_syscall_resolve_num_arch(xsb_scmp_arch_native(), number) else {
            return nil
        }
        defer { free(cName) }
        return String(cString: cName)
    }

    /// The native number of a syscall name, or `nil` when it is not a syscall of this architecture
    /// (libseccomp returns negative pseudo-numbers for other architectures' syscalls, such as `mmap2`).
    public static func number(of name: String) -> Int32? {
        let number = seccomp_syscall_resolve_name_arch(xsb_scmp_arch_native(), name)
        return number >= 0 ? number : nil
    }

    /// Every syscall name libseccomp knows for the native architecture, sorted.
    public static let allNames: [String] = {
        var names: Set<String> = []
        for number in Int32(0)..<1024 {
            if let name = name(of: number) { names.insert(name) }
        }
        return names.sorted()
    }()
}

/// systemd's named syscall groups (`@system-service`, `@file-system`, …), with systemd's names and
/// meanings (see `systemd.exec(5)`, SystemCallFilter=). Groups may include other groups.
///
/// The table is ours, written after systemd's `syscall_filter_sets`; it lists names for every
/// architecture, and names that are not x86_64 syscalls (or that this libseccomp does not know)
/// are skipped silently when a group is expanded, as systemd does.
public enum SyscallGroups {
    public struct Group: Sendable {
        public let name: String
        public let help: String
        /// Syscall names and `@group` references, as written in the table.
        public let entries: [String]
    }

    /// All groups, in systemd's order.
    public static let all: [Group] = [
        Group(name: "@default", help: "System calls that are always permitted", entries: [
            "@sandbox", "arch_prctl", "brk", "cacheflush", "clock_getres", "clock_getres_time64",
            "clock_gettime", "clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64", "execve",
            "exit", "exit_group", "futex", "futex_time64", "futex_waitv", "get_robust_list",
            "get_thread_area", "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32",
            "getgroups", "getgroups32", "getpgid", "getpgrp", "getpid", "getppid", "getrandom",
            "getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "getsid", "gettid",
            "gettimeofday", "getuid", "getuid32", "lsm_get_self_attr", "lsm_list_modules", "membarrier",
            "mmap", "mmap2", "mprotect", "mseal", "munmap", "nanosleep", "pause", "prlimit64",
            "restart_syscall", "riscv_flush_icache", "riscv_hwprobe", "rseq", "rt_sigreturn",
            "sched_getaffinity", "sched_yield", "set_robust_list", "set_thread_area", "set_tid_address",
            "set_tls", "sigreturn", "time", "ugetrlimit", "uretprobe",
        ]),
        Group(name: "@aio", help: "Asynchronous IO", entries: [
            "io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
            "io_setup", "io_submit", "io_uring_enter", "io_uring_register", "io_uring_setup",
        ]),
        Group(name: "@basic-io", help: "Basic IO", entries: [
            "_llseek", "close", "close_range", "dup", "dup2", "dup3", "llseek", "lseek", "pread64",
            "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readv", "write", "writev",
        ]),
        Group(name: "@chown", help: "Change ownership of files and directories", entries: [
            "chown", "chown32", "fchown", "fchown32", "fchownat", "lchown", "lchown32",
        ]),
        Group(name: "@clock", help: "Change the system time", entries: [
            "adjtimex", "clock_adjtime", "clock_adjtime64", "clock_settime", "clock_settime64",
            "settimeofday",
        ]),
        Group(name: "@cpu-emulation", help: "System calls for CPU emulation functionality", entries: [
            "modify_ldt", "subpage_prot", "switch_endian", "vm86", "vm86old",
        ]),
        Group(name: "@debug", help: "Debugging, performance monitoring and tracing functionality", entries: [
            "lookup_dcookie", "perf_event_open", "pidfd_getfd", "ptrace", "rtas", "s390_runtime_instr",
            "sys_debug_setcontext",
        ]),
        Group(name: "@file-system", help: "File system operations", entries: [
            "access", "chdir", "chmod", "close", "creat", "faccessat", "faccessat2", "fallocate",
            "fchdir", "fchmod", "fchmodat", "fchmodat2", "fcntl", "fcntl64", "fgetxattr", "file_getattr",
            "file_setattr", "flistxattr", "fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat",
            "fstatat64", "fstatfs", "fstatfs64", "ftruncate", "ftruncate64", "futimesat", "getcwd",
            "getdents", "getdents64", "getxattr", "getxattrat", "inotify_add_watch", "inotify_init",
            "inotify_init1", "inotify_rm_watch", "lgetxattr", "link", "linkat", "listmount", "listxattr",
            "listxattrat", "llistxattr", "lremovexattr", "lsetxattr", "lstat", "lstat64", "mkdir",
            "mkdirat", "mknod", "mknodat", "newfstat", "newfstatat", "oldfstat", "oldlstat", "oldstat",
            "open", "open_tree", "openat", "openat2", "readlink", "readlinkat", "removexattr",
            "removexattrat", "rename", "renameat", "renameat2", "rmdir", "setxattr", "setxattrat", "stat",
            "stat64", "statfs", "statfs64", "statmount", "statx", "symlink", "symlinkat", "truncate",
            "truncate64", "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes",
        ]),
        Group(name: "@io-event", help: "Event loop system calls", entries: [
            "_newselect", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
            "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "poll", "ppoll",
            "ppoll_time64", "pselect6", "pselect6_time64", "select",
        ]),
        Group(name: "@ipc", help: "SysV IPC, POSIX Message Queues or other IPC", entries: [
            "ipc", "memfd_create", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive",
            "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "msgctl",
            "msgget", "msgrcv", "msgsnd", "pipe", "pipe2", "process_madvise", "process_vm_readv",
            "process_vm_writev", "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "shmat",
            "shmctl", "shmdt", "shmget",
        ]),
        Group(name: "@keyring", help: "Kernel keyring access", entries: [
            "add_key", "keyctl", "request_key",
        ]),
        Group(name: "@memlock", help: "Memory locking control", entries: [
            "mlock", "mlock2", "mlockall", "munlock", "munlockall",
        ]),
        Group(name: "@module", help: "Loading and unloading of kernel modules", entries: [
            "delete_module", "finit_module", "init_module",
        ]),
        Group(name: "@mount", help: "Mounting and unmounting of file systems", entries: [
            "chroot", "fsconfig", "fsmount", "fsopen", "fspick", "mount", "mount_setattr", "move_mount",
            "open_tree_attr", "pivot_root", "umount", "umount2",
        ]),
        Group(name: "@network-io", help: "Network or Unix socket IO, should not be needed if not network facing", entries: [
            "accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
            "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "send", "sendmmsg", "sendmsg",
            "sendto", "setsockopt", "shutdown", "socket", "socketcall", "socketpair",
        ]),
        Group(name: "@obsolete", help: "Unusual, obsolete or unimplemented system calls", entries: [
            "_sysctl", "afs_syscall", "bdflush", "break", "create_module", "ftime", "get_kernel_syms",
            "getpmsg", "gtty", "idle", "lock", "mpx", "prof", "profil", "putpmsg", "query_module",
            "security", "sgetmask", "ssetmask", "stime", "stty", "sysfs", "tuxcall", "ulimit", "uselib",
            "ustat", "vserver",
        ]),
        Group(name: "@pkey", help: "System calls used for memory protection keys", entries: [
            "pkey_alloc", "pkey_free", "pkey_mprotect",
        ]),
        Group(name: "@privileged", help: "All system calls which need super-user capabilities", entries: [
            "@chown", "@clock", "@module", "@raw-io", "@reboot", "@swap", "_sysctl", "acct", "bpf",
            "capset", "chroot", "fanotify_init", "fanotify_mark", "nfsservctl", "open_by_handle_at",
            "pivot_root", "quotactl", "quotactl_fd", "setdomainname", "setfsuid", "setfsuid32",
            "setgroups", "setgroups32", "sethostname", "setresuid", "setresuid32", "setreuid",
            "setreuid32", "setuid", "setuid32", "vhangup",
        ]),
        Group(name: "@process", help: "Process control, execution, namespacing operations", entries: [
            "capget", "clone", "clone3", "execveat", "fork", "getrusage", "kill", "pidfd_open",
            "pidfd_send_signal", "prctl", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "setns", "swapcontext",
            "tgkill", "times", "tkill", "unshare", "vfork", "wait4", "waitid", "waitpid",
        ]),
        Group(name: "@raw-io", help: "Raw I/O port access", entries: [
            "ioperm", "iopl", "pciconfig_iobase", "pciconfig_read", "pciconfig_write",
            "s390_pci_mmio_read", "s390_pci_mmio_write",
        ]),
        Group(name: "@reboot", help: "Reboot and reboot preparation/kexec", entries: [
            "kexec_file_load", "kexec_load", "reboot",
        ]),
        Group(name: "@resources", help: "Alter resource settings", entries: [
            "ioprio_set", "mbind", "migrate_pages", "move_pages", "nice", "sched_setaffinity",
            "sched_setattr", "sched_setparam", "sched_setscheduler", "set_mempolicy",
            "set_mempolicy_home_node", "setpriority", "setrlimit",
        ]),
        Group(name: "@sandbox", help: "Sandbox functionality", entries: [
            "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "seccomp",
        ]),
        Group(name: "@setuid", help: "Operations for changing user/group credentials", entries: [
            "setgid", "setgid32", "setgroups", "setgroups32", "setregid", "setregid32", "setresgid",
            "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32", "setuid", "setuid32",
        ]),
        Group(name: "@signal", help: "Process signal handling", entries: [
            "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigsuspend", "rt_sigtimedwait",
            "rt_sigtimedwait_time64", "sigaction", "sigaltstack", "signal", "signalfd", "signalfd4",
            "sigpending", "sigprocmask", "sigsuspend",
        ]),
        Group(name: "@swap", help: "Enable/disable swap devices", entries: [
            "swapoff", "swapon",
        ]),
        Group(name: "@sync", help: "Synchronize files and memory to storage", entries: [
            "fdatasync", "fsync", "msync", "sync", "sync_file_range", "sync_file_range2", "syncfs",
        ]),
        Group(name: "@system-service", help: "General system service operations", entries: [
            "@aio", "@basic-io", "@chown", "@default", "@file-system", "@io-event", "@ipc", "@keyring",
            "@memlock", "@network-io", "@process", "@resources", "@setuid", "@signal", "@sync", "@timer",
            "arm_fadvise64_64", "capget", "capset", "copy_file_range", "fadvise64", "fadvise64_64",
            "flock", "get_mempolicy", "getcpu", "getpriority", "ioctl", "ioprio_get", "kcmp", "madvise",
            "mremap", "name_to_handle_at", "oldolduname", "olduname", "personality", "readahead",
            "readdir", "remap_file_pages", "sched_get_priority_max", "sched_get_priority_min",
            "sched_getattr", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
            "sched_rr_get_interval_time64", "sched_yield", "sendfile", "sendfile64", "setfsgid",
            "setfsgid32", "setfsuid", "setfsuid32", "setpgid", "setsid", "splice", "sysinfo", "tee",
            "umask", "uname", "userfaultfd", "vmsplice",
        ]),
        Group(name: "@timer", help: "Schedule operations by time", entries: [
            "alarm", "getitimer", "setitimer", "timer_create", "timer_delete", "timer_getoverrun",
            "timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create",
            "timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
        ]),
        // @known: every syscall libseccomp knows on this architecture (systemd: "all known syscalls
        // declared in the kernel"); its entries are filled in from libseccomp, see `entries(of:)`.
        Group(name: "@known", help: "All known syscalls declared in the kernel", entries: ["@obsolete"]),
    ]

    static let byName: [String: Group] = Dictionary(uniqueKeysWithValues: all.map { ($0.name, $0) })

    /// Group names, with their `@`.
    public static var names: [String] { all.map(\.name) }

    /// The x86_64 syscalls of a group (`"@file-system"`), nested groups expanded, sorted;
    /// `nil` for an unknown group.
    public static func syscalls(in group: String) -> [String]? {
        guard byName[group] != nil else { return nil }
        var out: Set<String> = []
        var visited: Set<String> = []
        expand(group, into: &out, visited: &visited)
        return out.sorted()
    }

    private static func expand(_ group: String, into out: inout Set<String>, visited: inout Set<String>) {
        guard let g = byName[group], visited.insert(group).inserted else { return }
        for entry in entries(of: g) {
            if entry.hasPrefix("@") {
                expand(entry, into: &out, visited: &visited)
            } else if Syscalls.number(of: entry) != nil {
                out.insert(entry)
            }
        }
    }

    private static func entries(of group: Group) -> [String] {
        group.name == "@known" ? group.entries + Syscalls.allNames : group.entries
    }
}
