import Glibc
import SandboxExec

// `extsandbox`: a one-shot `exec` in its common shapes runs here, in a binary that links the
// sandbox's runtime and little else, so that its start-up is short; every other command (and
// `exec`'s help, usage errors and rarer shapes) belongs to `extsandbox-commands`, which this
// process becomes, with the same arguments (CommandsExecutable.swift).
let arguments = CommandLine.arguments.dropFirst()
if arguments.first == "exec", let request = ExecRequest.quickParse(arguments.dropFirst()) {
    ExecRun.runAndExit(request)
}
CommandsExecutable.become(arguments: CommandLine.arguments)
