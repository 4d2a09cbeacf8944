import ExtSandbox
import ExtensionCatalog
import Glibc
import SandboxPolicy
import SandboxRuntime
import SandboxSystem

/// Writes an error and, on the next line, what to do about it:
/// `extsandbox: MESSAGE` then `extsandbox: hint: WHAT TO DO`.
func printError(_ message: String, hint: String?) {
    printError(message)
    if let hint { printError("hint: \(hint)") }
}

/// What to do about the CLI's common failures: the error names the file, the extension or the
/// step; the advice is the line after it.
enum ErrorAdvice {
    /// For a policy that could not be found, trusted or loaded (`nameOrPath` as the user gave it).
    static func policy(_ error: PolicyError, nameOrPath: String) -> String {
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
    static func launch(_ error: SandboxError) -> String? {
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

    /// For an extension that could not be launched: its policy's advice, its failed step's, or
    /// its bundle's or approvals file's.
    static func extensionLaunch(_ error: any Error) -> String? {
        switch error {
        case ExtensionError.policyFailed(let level, let policyError): return policy(policyError, nameOrPath: level)
        case ExtensionError.sandboxFailed(let sandboxError): return launch(sandboxError)
        case ExtensionError.discovery(.catalog(let problem)): return catalog(problem)
        default: return nil
        }
    }

    /// For a broken, inconsistent or unsafe bundle, declaration or approvals file.
    static func catalog(_ problem: CatalogProblem) -> String {
        let locations = ExtensionLocations.standard(hostBundle: nil)
        let approvals = locations.stateFile
        if problem.file == locations.systemStateFile || problem.file.hasPrefix(locations.systemStateFile + ".") {
            return "the administrator's file decides for every user: root must own it and the directories above it, "
                + "and `extsandbox approve --system`, `revoke --system` and `forbid` (as root) rewrite it; "
                + "EXTSANDBOX_SYSTEM_APPROVALS names another"
        }
        if problem.file == approvals && problem.kind == .unsafe {
            return "use an approvals file of your own: fix the owner or mode of what the message names, or point "
                + "XDG_STATE_HOME or EXTSANDBOX_STATE_FILE at a directory of yours"
        }
        if problem.file == approvals || problem.file.hasPrefix(approvals + ".") {
            return "fix or delete that line of the approvals file (extsandbox approve, revoke, enable and disable "
                + "rewrite it); EXTSANDBOX_STATE_FILE names another"
        }
        switch problem.kind {
        case .unsafe:
            return "make it writable only by its owner, and owned by you or root (chmod go-w \(TerminalText.escaped(problem.file)))"
        case .notInstalled:
            return "`extsandbox list` shows what is installed now"
        case .broken, .inconsistent:
            return "fix the file (docs/extensions.md describes extension.yaml and the point declarations); "
                + "`extsandbox list --all` shows every invalid bundle with why"
        }
    }
}
