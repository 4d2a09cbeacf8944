import Glibc
import SandboxExec

// `extsandbox`: a one-shot `exec` in its common shapes runs here, in a binary that links the
// sandbox's runtime and little else, so that its start-up is short; every other command (and
// `exec`'s help, usage errors and rarer shapes) belongs to `extsandbox-commands`, which this
// process becomes, with the same arguments (CommandsExecutable.swift).
let arguments = CommandLine.arguments.dropFirst()
if arguments.first == "exec", let request = ExecRequest.quickParse(arguments.dropFirst()) {
    let status = ExecRun.run(request)
    // Nothing is left to clean up (the sandbox, its cgroups and fds are gone once `run`
    // returns), so skip the exit-time teardown.
    fflush(nil)
    _exit(status)
}
CommandsExecutable.become(arguments: CommandLine.arguments)
