import ArgumentParser

/// The `extsandbox` command: run programs in the sandbox an extension would get.
@main
struct ExtSandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extsandbox",
        abstract: "Run programs in extsandbox's Linux sandbox.",
        discussion: """
            extsandbox confines a program in its own user, mount, network, PID, IPC and UTS \
            namespaces, with no capabilities, no_new_privs, resource limits and a seccomp \
            filter, as described by a policy file (see `Policies/` and docs/policy-format.md).
            """,
        subcommands: [ExecCommand.self, PolicyCommand.self])
}
