import SandboxExec
import DockerProfileImport
import ArgumentParser
import FoundationEssentials
import Glibc
import PolicyTools
import SandboxPolicy
import SandboxSystem

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
                is not is marked "refused" with the reason, and nothing is loaded from it; the \
                exit status is then 1.

                --json prints one object with stable field names: directories (the search path \
                in order: path, role "install" or "admin", status "present", "missing" or \
                "refused", reason when refused) and policies (sorted by name: name, file (the one \
                that wins), description, broken (true when it does not load), shadowed (the files \
                it overrides)).

                Examples:
                  extsandbox policy list
                  extsandbox policy list --json
                  EXTSANDBOX_POLICIES_DIR=$PWD/Policies extsandbox policy list
                """)

        @Flag(name: .long, help: "Print a JSON object instead of the search path and the table.")
        var json = false

        /// One directory of the search path, as `--json` prints it.
        struct Directory: Codable {
            var path: String
            var role: String
            var status: String
            var reason: String?
        }

        /// One policy name, as `--json` prints it.
        struct Entry: Codable {
            var name: String
            var file: String
            var description: String
            var broken: Bool
            var shadowed: [String]
        }

        struct Listing: Codable {
            var directories: [Directory]
            var policies: [Entry]
        }

        func run() throws {
            let path = PolicyCommand.searchPath
            let directories = path.directories.map { dir -> Directory in
                let role = dir == PolicySearchPath.systemDirectory ? "admin" : "install"
                switch PolicySearchPath.status(ofDirectory: dir) {
                case .present: return Directory(path: dir, role: role, status: "present")
                case .missing: return Directory(path: dir, role: role, status: "missing")
                case .refused(let reason): return Directory(path: dir, role: role, status: "refused", reason: reason)
                }
            }
            let refused = directories.contains { $0.status == "refused" }
            let entries = path.entries()
            let winners = Dictionary(entries.filter(\.isEffective).map { ($0.name, $0.file) }, uniquingKeysWith: { a, _ in a })
            let names = Set(entries.map(\.name)).sorted()
            let policies = ProgressLine.during("loading policies") { progress in
                names.enumerated().map { index, name -> Entry in
                    progress.update("loading \(name) (\(index + 1) of \(names.count))")
                    let winner = winners[name]!
                    let shadowed = entries.filter { $0.name == name && !$0.isEffective }.map(\.file)
                    do {
                        let policy = try PolicyLoader.load(file: winner, searchPath: path)
                        let text = policy.description.split(whereSeparator: \.isNewline).joined(separator: " ")
                        return Entry(name: name, file: winner, description: text, broken: false, shadowed: shadowed)
                    } catch {
                        return Entry(name: name, file: winner, description: "", broken: true, shadowed: shadowed)
                    }
                }
            }
            if json {
                try JSONOutput.print(Listing(directories: directories, policies: policies))
                if refused { throw ExitCode(1) }
                return
            }

            let style = OutputStyle.standardOutput
            print("Search path (a later directory wins):")
            for (i, dir) in directories.enumerated() {
                let role = dir.role == "admin" ? "the admin's policies" : "the install's policies"
                switch dir.status {
                case "missing": print("  \(i + 1). \(dir.path)  (\(role); does not exist)")
                case "refused": print("  \(i + 1). \(dir.path)  (\(role); \(style.paint("REFUSED", .red)): \(dir.reason ?? ""))")
                default: print("  \(i + 1). \(dir.path)  (\(role))")
                }
            }
            print("  A name with \"/\" or ending in .yaml is a path, used as is (extsandbox exec --policy ./mine.yaml).")
            print("")

            guard !policies.isEmpty else {
                print("No policies found.")
                if refused { throw ExitCode(1) }
                return
            }
            var table = Table(["NAME", "FILE"])
            for entry in policies {
                var notes: [String] = []
                if entry.broken {
                    notes.append(style.paint("BROKEN", .red) + ": run `extsandbox policy check \(entry.name)` for its problems")
                } else if !entry.description.isEmpty {
                    notes.append(entry.description.count > 90 ? String(entry.description.prefix(89)) + "…" : entry.description)
                }
                notes += entry.shadowed.map { "shadowed: \($0)" }
                table.add([entry.name, entry.file], notes: notes)
            }
            print(table.render(style), terminator: "")
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

                Exit status: 0 when every policy is valid, 1 when any has a problem, 64 for a usage \
                error.

                --json prints an array, one object per policy named, with stable field names: \
                policy (as given), file (the file it named; absent when none was found), ok, \
                problems (each with file, line, column (0 when unknown) and message) and, for a \
                valid policy, defaultAction, namedSyscalls, instructions (of the BPF filter) and \
                files (how many files it is made from).

                Examples:
                  extsandbox policy check standard
                  extsandbox policy check --json ./my-policy.yaml
                  extsandbox policy check Policies/*.yaml /etc/extsandbox/policies/*.yaml
                  extsandbox policy check ./my-policy.yaml && extsandbox exec --policy ./my-policy.yaml -- ./tool
                """)

        @Argument(help: ArgumentHelp("Policy files or names.", valueName: "file|name"), completion: CompletionCandidates.policy)
        var policies: [String]

        func validate() throws {
            if policies.isEmpty { throw ValidationError("Name at least one policy file to check.") }
        }

        @Flag(name: .long, help: "Print a JSON array, one object per policy, instead of the report.")
        var json = false

        /// One problem, as `--json` prints it (line and column 0 when it concerns the whole file).
        struct Problem: Codable {
            var file: String
            var line: Int
            var column: Int
            var message: String
        }

        /// One checked policy, as `--json` prints it.
        struct Result: Codable {
            var policy: String
            var file: String?
            var ok: Bool
            var problems: [Problem]
            var defaultAction: String?
            var namedSyscalls: Int?
            var instructions: Int?
            var files: Int?
        }

        func run() throws {
            let results = ProgressLine.during("checking policies") { progress in
                policies.enumerated().map { index, item in
                    progress.update("checking \(item) (\(index + 1) of \(policies.count))")
                    return Self.check(item)
                }
            }
            let failed = results.filter { !$0.ok }.count
            if json {
                try JSONOutput.print(results)
            } else {
                let style = OutputStyle.standardOutput
                for result in results {
                    for p in result.problems {
                        let location = p.line <= 0 ? p.file : p.column <= 0 ? "\(p.file):\(p.line)" : "\(p.file):\(p.line):\(p.column)"
                        print("\(location): \(p.message)")
                    }
                    if result.ok, let file = result.file, let instructions = result.instructions {
                        let made = (result.files ?? 1) > 1 ? ", made from \(result.files!) files" : ""
                        print("\(file): \(style.paint("ok", .green)) (default \(result.defaultAction ?? "?"), \(result.namedSyscalls ?? 0) system calls named, \(instructions) BPF instructions\(made))")
                    }
                }
            }
            if failed > 0 {
                PolicyCommand.complain("\(failed) of \(policies.count) \(policies.count == 1 ? "policy has" : "policies have") problems")
                throw ExitCode(1)
            }
        }

        /// Checks one policy: every problem of every file, else the compiled filter's summary.
        static func check(_ item: String) -> Result {
            func failure(_ errors: [PolicyError], file: String?) -> Result {
                let problems = errors.flatMap { [$0] + $0.additional }.map {
                    Problem(file: $0.file, line: $0.line, column: $0.column, message: $0.message)
                }
                return Result(policy: item, file: file, ok: false, problems: problems)
            }
            let file: String
            do {
                file = try PolicyCommand.file(for: item)
            } catch {
                return failure([error], file: nil)
            }
            let problems = PolicyLoader.check(file: file, searchPath: PolicyCommand.searchPath)
            if !problems.isEmpty { return failure(problems, file: file) }
            do {
                let policy = try PolicyLoader.load(file: file, searchPath: PolicyCommand.searchPath)
                let filter = try policy.compileSeccompFilter(mode: .supervised)
                return Result(policy: item, file: file, ok: true, problems: [], defaultAction: "\(policy.seccomp.defaultAction)",
                              namedSyscalls: Set(policy.seccomp.rules.map(\.syscall)).count,
                              instructions: filter.instructionCount, files: policy.composedFrom.count)
            } catch {
                return failure([error], file: file)
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

                --json prints one object with these stable fields (a value the policy leaves \
                unset is left out): name, description, file, madeFrom (every file it was made \
                from, later ones winning), seccomp (default, execAfterStart, \
                memoryDenyWriteExecute, rules: syscall, action, when (conditions that must all \
                hold; empty: always), why; sorted by system call, and for one call in the order \
                the filter tries them), filesystem (mounts: kind bind, ro-bind or tmpfs, \
                source, destination, optional, sizeBytes; masked), network (none), environment \
                (pass, set), limits (memoryBytes, memoryScope, processes, cpuSeconds, openFiles, \
                fileSizeBytes, wallClockSeconds), filterInstructions. Actions are written as in \
                a policy file (allow, kill, log, errno EPERM). Every call no rule names gets \
                the default (--all lists them in the text form only).

                Examples:
                  extsandbox policy show standard
                  extsandbox policy show --json standard | jq '.seccomp.rules[] | select(.action == "allow") | .syscall'
                  extsandbox policy show ./my-policy.yaml
                  extsandbox policy show --all hardened | grep -w kill
                """)

        @Argument(help: ArgumentHelp("A policy name or file.", valueName: "name|path"), completion: CompletionCandidates.policy)
        var policy: String

        @Flag(name: .long, help: "Also list every x86_64 system call the policy does not name (with the default action).")
        var all = false

        @Flag(name: .long, help: "Print a JSON object instead of the report.")
        var json = false

        func run() throws {
            let loaded: Policy
            do throws(PolicyError) {
                loaded = try PolicyLoader.load(nameOrPath: policy, searchPath: PolicyCommand.searchPath)
            } catch {
                printError("\(error)", hint: ErrorAdvice.policy(error, nameOrPath: policy))
                throw ExitCode(1)
            }
            if json {
                try JSONOutput.print(PolicyJSON(loaded))
            } else {
                print(PolicyReport.show(loaded, everySyscall: all), terminator: "")
            }
        }
    }

    // MARK: import-docker

    struct ImportDocker: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import-docker",
            abstract: "Convert an OCI seccomp profile (JSON: Docker's, Podman's, containerd's) into a policy file.",
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

        @Argument(help: ArgumentHelp("The profile (JSON).", valueName: "file.json"), completion: .file(extensions: ["json"]))
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
