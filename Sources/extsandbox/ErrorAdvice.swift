import ExtSandbox
import ExtensionCatalog
import Glibc
import SandboxExec
import SandboxSystem

/// The CLI's advice beyond a launch's and a policy's (those are SandboxExec's, which `exec` uses).
extension ErrorAdvice {
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
