/// System calls that a policy may allow only with a written reason.
///
/// Each of them either reaches into other processes, changes what the sandbox itself is
/// (namespaces, mounts, filters), or exposes a large, often-exploited part of the kernel.
/// A policy that lets one of them run (`allow` or `log`, by a group, by name, by a rule or by
/// the default action) must do so with an explicit rule that has a `why:`, or it does not load:
///
/// ```yaml
/// rules:
///   - syscall: ptrace
///     action: allow
///     why: The debugger extension traces its own children.
/// ```
///
/// This is the one place the list lives; `docs/policy-format.md` prints it.
public enum DangerousSyscalls {
    /// Name → why it is dangerous (one sentence, shown in error messages).
    public static let reasons: [String: String] = [
        "ptrace": "it reads and writes the memory and registers of other processes",
        "process_vm_readv": "it reads the memory of other processes",
        "process_vm_writev": "it writes the memory of other processes",
        "pidfd_getfd": "it steals file descriptors from other processes",
        "kcmp": "it compares kernel objects of other processes, leaking their layout",
        "perf_event_open": "it exposes the performance-monitoring subsystem, a frequent source of kernel exploits",
        "bpf": "it loads programs into the kernel",
        "userfaultfd": "it lets a process stall the kernel at chosen points, a favourite tool of kernel exploits",
        "io_uring_setup": "io_uring performs operations that the seccomp filter never sees",
        "io_uring_enter": "io_uring performs operations that the seccomp filter never sees",
        "io_uring_register": "io_uring performs operations that the seccomp filter never sees",
        "unshare": "it creates new namespaces, the door to most unprivileged kernel attack surface",
        "setns": "it enters other namespaces",
        "mount": "it changes the sandbox's file system",
        "umount2": "it changes the sandbox's file system",
        "pivot_root": "it changes the sandbox's root",
        "chroot": "it changes the sandbox's root",
        "fsopen": "it is part of the mount API, which changes the sandbox's file system",
        "fsconfig": "it is part of the mount API, which changes the sandbox's file system",
        "fsmount": "it is part of the mount API, which changes the sandbox's file system",
        "fspick": "it is part of the mount API, which changes the sandbox's file system",
        "move_mount": "it is part of the mount API, which changes the sandbox's file system",
        "open_tree": "it is part of the mount API, which changes the sandbox's file system",
        "mount_setattr": "it is part of the mount API, which changes the sandbox's file system",
        "keyctl": "the kernel keyring is not namespaced: it is shared with the host",
        "add_key": "the kernel keyring is not namespaced: it is shared with the host",
        "request_key": "the kernel keyring is not namespaced: it is shared with the host",
        "kexec_load": "it replaces the running kernel",
        "kexec_file_load": "it replaces the running kernel",
        "init_module": "it loads code into the kernel",
        "finit_module": "it loads code into the kernel",
        "delete_module": "it unloads kernel code",
        "open_by_handle_at": "it opens files by handle, bypassing the sandbox's mount namespace",
        "reboot": "it restarts the machine",
        "swapon": "it changes the machine's swap",
        "swapoff": "it changes the machine's swap",
        "iopl": "it gives direct access to hardware I/O ports",
        "ioperm": "it gives direct access to hardware I/O ports",
        "modify_ldt": "it changes the CPU's descriptor tables, historically a source of kernel bugs",
        "acct": "it turns process accounting on for the whole machine",
    ]

    /// The dangerous system calls, sorted.
    public static var names: [String] { reasons.keys.sorted() }

    /// Whether `name` needs a justification when allowed.
    public static func contains(_ name: String) -> Bool { reasons[name] != nil }
}
