import ArgumentParser
import FoundationEssentials
import Glibc
import SandboxPolicy

/// `extsandbox policy …`: the admin's tools for policy files.
struct PolicyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "policy",
        abstract: "List, check, show and import sandbox policies.",
        discussion: """
            A policy is a YAML file that says what a sandboxed program may do: its system calls \
            (seccomp), what it sees of the file system, its network, environment and limits. \
            The format is described in docs/policy-format.md.

            Policies are named by their file name without .yaml and looked up along a search \
            path; the last directory that has the file wins, so an admin's copy in \
            /etc/extsandbox/policies overrides the shipped one. A value containing "/" or \
            ending in .yaml is a path and is used as is.

            Examples:
              extsandbox policy list
              extsandbox policy check standard ./my-policy.yaml
              extsandbox policy show hardened
              extsandbox policy import-docker /usr/share/containers/seccomp.json > mine.yaml
            """,
        subcommands: [List.self, Check.self, Show.self, ImportDocker.self])

    static let searchPath = PolicySearchPath.default(executablePath: PolicySearchPath.currentExecutable())

    static func complain(_ message: String) { printError(message) }

    /// The file for a name or a path.
    static func file(for nameOrPath: String) throws(PolicyError) -> String {
        if PolicyLoader.isPath(nameOrPath) { return nameOrPath }
        return try searchPath.locate(name: nameOrPath)
    }

    // MARK: list

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the policy search path and every policy on it.",
            discussion: """
                Prints the search path (the install's policies directory, then \
                /etc/extsandbox/policies; later directories win), then every policy file found, \
                with its description. A policy that a later directory overrides is marked \
                "shadowed by" the file that wins. A broken policy is marked; run \
                `extsandbox policy check NAME` for its problems.

                The install's directory is PREFIX/share/extsandbox/policies, PREFIX being the \
                parent of the directory holding the extsandbox executable (symbolic links \
                resolved), or $EXTSANDBOX_POLICIES_DIR when set (for a checkout's Policies \
                directory). Every policy directory and file, and every directory above them, must \
                be owned by root or by you and not writable by group or others; a directory that \
                is not is marked "refused" with the reason, and nothing is loaded from it.

                Examples:
                  extsandbox policy list
                  EXTSANDBOX_POLICIES_DIR=$PWD/Policies extsandbox policy list
                """)

        func run() throws {
            let path = PolicyCommand.searchPath
            print("Search path (a later directory wins):")
            var refused = false
            for (i, dir) in path.directories.enumerated() {
                let role = dir == PolicySearchPath.systemDirectory ? "the admin's policies" : "the install's policies"
                switch PolicySearchPath.status(ofDirectory: dir) {
                case .present:
                    print("  \(i + 1). \(dir)  (\(role))")
                case .missing:
                    print("  \(i + 1). \(dir)  (\(role); does not exist)")
                case .refused(let reason):
                    refused = true
                    print("  \(i + 1). \(dir)  (\(role); REFUSED: \(reason))")
                }
            }
            print("  A name with \"/\" or ending in .yaml is a path, used as is (extsandbox exec --policy ./mine.yaml).")
            print("")

            let entries = path.entries()
            guard !entries.isEmpty else {
                print("No policies found.")
                if refused { throw ExitCode(1) }
                return
            }
            let winners = Dictionary(entries.filter(\.isEffective).map { ($0.name, $0.file) }, uniquingKeysWith: { a, _ in a })
            let nameWidth = max(12, (entries.map(\.name.count).max() ?? 0) + 2)
            for name in Set(entries.map(\.name)).sorted() {
                let winner = winners[name]!
                let summary: String
                do {
                    let policy = try PolicyLoader.load(file: winner, searchPath: path)
                    let text = policy.description.split(whereSeparator: \.isNewline).joined(separator: " ")
                    summary = text.count > 90 ? String(text.prefix(89)) + "…" : text
                } catch {
                    summary = "BROKEN: \(error.additional.count + 1) problem(s); run `extsandbox policy check \(name)`"
                }
                print(name + String(repeating: " ", count: max(1, nameWidth - name.count)) + winner)
                if !summary.isEmpty { print(String(repeating: " ", count: nameWidth) + summary) }
                for shadowed in entries where shadowed.name == name && !shadowed.isEffective {
                    print(String(repeating: " ", count: nameWidth) + "shadowed: \(shadowed.file)")
                }
            }
            // A refused directory makes every lookup by name fail: say so in the status too.
            if refused { throw ExitCode(1) }
        }
    }

    // MARK: check

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Report every problem of policy files.",
            discussion: """
                Checks each policy (a path, or a name looked up on the search path) with the \
                files it extends and includes, and compiles its seccomp filter. Every problem \
                of every file is printed as FILE:LINE:COLUMN: message (FILE: message when it \
                concerns the file as a whole), with a suggestion where one is obvious. \
                A valid policy prints "FILE: ok".

                Exit status: 0 when every policy is valid, 1 when any has a problem.

                Examples:
                  extsandbox policy check standard
                  extsandbox policy check Policies/*.yaml /etc/extsandbox/policies/*.yaml
                  extsandbox policy check ./my-policy.yaml && extsandbox exec --policy ./my-policy.yaml -- ./tool
                """)

        @Argument(help: ArgumentHelp("Policy files or names.", valueName: "file|name"))
        var policies: [String]

        func validate() throws {
            if policies.isEmpty { throw ValidationError("Name at least one policy file to check.") }
        }

        func run() throws {
            var failed = 0
            for item in policies {
                let file: String
                do {
                    file = try PolicyCommand.file(for: item)
                } catch {
                    print("\(error)")
                    failed += 1
                    continue
                }
                let problems = PolicyLoader.check(file: file, searchPath: PolicyCommand.searchPath)
                if !problems.isEmpty {
                    for p in problems { print("\(p.location): \(p.message)") }
                    failed += 1
                    continue
                }
                do {
                    let policy = try PolicyLoader.load(file: file, searchPath: PolicyCommand.searchPath)
                    let filter = try policy.compileSeccompFilter(mode: .supervised)
                    let named = Set(policy.seccomp.rules.map(\.syscall)).count
                    var made = ""
                    if policy.composedFrom.count > 1 { made = ", made from \(policy.composedFrom.count) files" }
                    print("\(file): ok (default \(policy.seccomp.defaultAction), \(named) system calls named, \(filter.instructionCount) BPF instructions\(made))")
                } catch {
                    print("\(error)")
                    failed += 1
                }
            }
            if failed > 0 {
                PolicyCommand.complain("\(failed) of \(policies.count) \(policies.count == 1 ? "policy has" : "policies have") problems")
                throw ExitCode(1)
            }
        }
    }

    // MARK: show

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a policy fully resolved: every system call, binds, network, environment, limits.",
            discussion: """
                Resolves the policy (following extends and include, expanding every group) and \
                prints what the sandbox gets: the default action, each system call the policy \
                names with its action, conditions and justification (sorted by name, like \
                `systemd-analyze syscall-filter`), the file system, network, environment and \
                limits, and the size of the compiled BPF filter.

                Examples:
                  extsandbox policy show standard
                  extsandbox policy show ./my-policy.yaml
                  extsandbox policy show --all hardened | grep -w kill
                """)

        @Argument(help: ArgumentHelp("A policy name or file.", valueName: "name|path"))
        var policy: String

        @Flag(name: .long, help: "Also list every x86_64 system call the policy does not name (with the default action).")
        var all = false

        func run() throws {
            do {
                let loaded = try PolicyLoader.load(nameOrPath: policy, searchPath: PolicyCommand.searchPath)
                print(PolicyReport.show(loaded, everySyscall: all), terminator: "")
            } catch {
                print("\(error)")
                throw ExitCode(1)
            }
        }
    }

    // MARK: import-docker

    struct ImportDocker: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import-docker",
            abstract: "Convert a Docker/OCI seccomp profile (JSON) into a policy file.",
            discussion: """
                Reads a seccomp profile in the format of Docker, Podman and containerd \
                (defaultAction, syscalls[].names/action/args/errnoRet, includes/excludes) and \
                writes an extsandbox policy to standard output, with a header that names the \
                profile. What has no equivalent (other architectures, capability-dependent \
                entries, SCMP_ACT_NOTIFY, flags, names that are not x86_64 system calls) is \
                listed in the header and reported on standard error. Dangerous system calls \
                the profile allows become commented-out rules: extsandbox lets them run only \
                with a written reason.

                A profile describes only system calls: the file system, network and \
                environment sections are a minimal starting point; edit them.

                Examples:
                  extsandbox policy import-docker default.json > docker-default.yaml
                  extsandbox policy check docker-default.yaml
                """)

        @Argument(help: ArgumentHelp("The profile (JSON).", valueName: "file.json"))
        var profile: String

        func run() throws {
            let data: Data
            switch SystemFiles.bytes(profile, limit: 16 << 20) {
            case .success(let bytes): data = Data(bytes)
            case .failure(let error):
                PolicyCommand.complain("\(profile): cannot read the file: \(error)")
                throw ExitCode(1)
            }
            do {
                let output = try DockerProfileImporter.convert(json: data, source: profile)
                print(output.yaml, terminator: "")
                for warning in output.warnings { PolicyCommand.complain("warning: \(warning)") }
            } catch {
                PolicyCommand.complain(error.message)
                throw ExitCode(1)
            }
        }
    }
}
