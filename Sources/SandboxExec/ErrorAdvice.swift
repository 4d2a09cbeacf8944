import Glibc
import SandboxPolicy
import SandboxRuntime

/// What to do about the CLI's common failures: the error names the file, the extension or the
/// step; the advice is the line after it.
package enum ErrorAdvice {
    /// For a policy that could not be found, trusted or loaded (`nameOrPath` as the user gave it).
    package static func policy(_ error: PolicyError, nameOrPath: String) -> String {
        let message = error.message
        if message.contains("refused: ") {
            return "make the directory named above (and every one above it) owned by you or root and not writable by "
                + "group or others (chmod go-w DIR), or move the policy to one that is; `extsandbox policy list` shows "
                + "which policy directories are refused"
        }
        if message.hasPrefix("no policy named") || message.hasPrefix("not a policy name") {
            return "`extsandbox policy list` shows the policies found by name; for a file elsewhere give its path "
                + "(--policy ./\(nameOrPath).yaml)"
        }
        if message == "no such policy file" || message.hasSuffix("not a policy file") {
            return "check the path, or name a policy (`extsandbox policy list` shows them)"
        }
        return "`extsandbox policy check \(nameOrPath)` lists every problem of the policy with its line"
    }

    /// For a sandbox that could not be set up, by the launch step that failed.
    package static func launch(_ error: SandboxError) -> String? {
        switch error.step {
        case .bindMount, .symlink, .fileCreate:
            return "check that every --ro-bind/--bind source and every path the policy binds exists and is readable "
                + "by the sandbox's user (nobody, 65534, when you run as root)"
        case .clone, .userNamespaceMap:
            return "this kernel refuses new user namespaces to you: allow unprivileged ones "
                + "(sysctl kernel.unprivileged_userns_clone=1, or kernel.apparmor_restrict_unprivileged_userns=0) "
                + "or run as root"
        case .cgroup, .cgroupAttach, .cgroupNamespace:
            return "a policy's memory limit needs a cgroup you may create: run as root, under "
                + "`systemd-run --user --scope -p Delegate=yes -- extsandbox exec …`, or say memory-scope: per-process "
                + "in the policy"
        case .workingDirectory:
            return "--chdir must name a directory visible inside the sandbox (bind it with --ro-bind or --bind)"
        case .exec:
            return "check that the program, its interpreter (#!) and its libraries are visible in the sandbox and "
                + "executable by its user (nobody, 65534, when you run as root); `extsandbox policy show` lists the binds"
        case .seccomp:
            return "`extsandbox policy check` the policy; a filter the kernel refuses is a bug worth reporting"
        case .resourceLimit where error.errorNumber == EMFILE:
            return "raise the policy's open-files limit (limits: { open-files: N }) to at least the value named above"
        case .resourceLimit:
            return "the policy's limits exceed your hard limits (ulimit -H -a); lower them in the policy"
        case .initExec:
            return "the sandbox init xsb-init must sit next to extsandbox or in PREFIX/libexec/extsandbox, owned by root "
                + "and not writable by others (scripts/install puts it there), or be named by EXTSANDBOX_INIT"
        default:
            return "`extsandbox exec --verbose` shows the sandbox's lifecycle; docs/architecture.md describes each launch step"
        }
    }
}
