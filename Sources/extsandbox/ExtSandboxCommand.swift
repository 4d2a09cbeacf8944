import ArgumentParser
import CSandboxSystem
import Glibc
import SandboxExec
import Synchronization
import SandboxSystem

/// The `extsandbox` command: run programs in the sandbox an extension would get.
@main
struct ExtSandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extsandbox",
        abstract: "Run programs in extsandbox's Linux sandbox.",
        discussion: """
            extsandbox confines a program in its own user, mount, network, PID, IPC, UTS and \
            cgroup namespaces, with no capabilities, no_new_privs, resource limits and a seccomp \
            filter, as described by a policy file (`extsandbox policy list` shows where they are \
            looked up; the format is in docs/policy-format.md and the shipped ones are in \
            PREFIX/share/extsandbox/policies).
            """,
        version: ExtSandboxVersion.description,
        subcommands: [ExecCommand.self, PolicyCommand.self, ListCommand.self, ApproveCommand.self, RevokeCommand.self,
                      EnableCommand.self, DisableCommand.self, ForbidCommand.self, ResetCommand.self, InstallCommand.self, UninstallCommand.self,
                      KeyCommand.self, SignCommand.self, VerifyCommand.self, RunCommand.self, TestCommand.self])

    /// `exec` in its common shapes skips ArgumentParser (see ``ExecRequest/quickParse(_:)``);
    /// everything else, help and usage errors included, goes through it. `exec` runs on the main
    /// thread either way (it blocks while its program runs: never on a thread of Swift's
    /// concurrency pool, which its own timers need), so its other shapes are parsed here,
    /// synchronously, rather than by the asynchronous `main`.
    static func main() async {
        // exec'd by descriptor (`extsandbox` runs every command but `exec` so), a process is
        // named after the descriptor's number on some kernels: name it as users know it.
        _ = xsb_name_this_thread("extsandbox")
        let arguments = CommandLine.arguments.dropFirst()
        guard arguments.first == "exec" else {
            await main(nil)
            return
        }
        let request: ExecRequest
        if let quick = ExecRequest.quickParse(arguments.dropFirst()) {
            request = quick
        } else {
            do {
                guard let command = try parseAsRoot(Array(arguments)) as? ExecCommand else {
                    await main(nil)
                    return
                }
                request = command.request
            } catch {
                exit(withError: error)
            }
        }
        ExecRun.runAndExit(request)
    }
}
