import ArgumentParser
import Glibc
import Synchronization
import SandboxSystem

/// Where the CLI's own lines go: standard error, or, while a sandboxed program writes to a
/// regular file that is the CLI's standard error, the program's own description of that file, so
/// that the two share one file offset and neither overwrites the other (SandboxStreams).
let diagnosticsDescriptor = Atomic<Int32>(2)

/// Writes "extsandbox: MESSAGE" and a newline to stderr, in one write where it fits. Control
/// characters in the message are shown escaped (its line feeds kept): messages quote manifests,
/// bundle paths and what extensions said.
func printError(_ message: String) {
    let bytes = Array("extsandbox: \(TerminalText.escaped(message, keepingLineFeeds: true))\n".utf8)
    writeAll(diagnosticsDescriptor.load(ordering: .acquiring), bytes)
}

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
        do {
            try ExecCommand.run(request)
        } catch let code as ExitCode {
            // Nothing is left to clean up (the sandbox, its cgroups and fds are gone once
            // `run` returns), so skip the exit-time teardown of a large static binary.
            fflush(nil)
            _exit(code.rawValue)
        } catch {
            exit(withError: error)
        }
    }
}
