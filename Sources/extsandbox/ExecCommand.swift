import ArgumentParser
import Dispatch
import Glibc
import SandboxExec

/// `extsandbox exec`: run one program under a policy, with stdio attached.
struct ExecCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec",
        abstract: "Run a program inside a sandbox and exit with its status.",
        discussion: """
            The program runs in new user, mount, network (loopback only), PID, IPC, UTS and \
            cgroup namespaces, as uid/gid 1000 (on the host: the caller, or nobody/nogroup \
            65534 when the caller is root, so the program, its libraries and every bind source \
            must be readable by 65534 then), in a new session, with every capability \
            dropped, no_new_privs, the policy's rlimits and cgroup limits, and the policy's \
            seccomp filter loaded last. A policy's memory limit is for the whole sandbox and \
            needs a memory cgroup the caller may create cgroups under (root, or a delegated one: \
            systemd-run --user --scope -p Delegate=yes -- extsandbox exec …); without one the \
            launch fails, unless the policy says memory-scope: per-process.

            The file system is an empty read-only tmpfs holding only what the policy and the \
            --ro-bind/--bind options list, a fresh /proc, a minimal /dev (null, zero, full, \
            random, urandom, a writable shm, and tty when a terminal is relayed) and a writable /tmp; /tmp and /dev/shm share the \
            policy's /tmp size. PROGRAM itself is made \
            visible if no bind covers it; a PROGRAM without a slash is looked up in $PATH.

            Working directory: --chdir, else the current directory when a bind (yours or the \
            policy's) shows it inside, at the path where it shows it (so --ro-bind "$PWD" runs \
            the program where you are, as bwrap and firejail do) and the sandbox's user may \
            enter it; else /, with a hint when an argument names a file of the current directory \
            or when the sandbox's user cannot enter it.

            Standard streams: the program never shares the caller's open files. A terminal is \
            relayed through a pseudo-terminal of the CLI's (the program's controlling terminal, \
            which /dev/tty opens; it has no name under /dev/pts inside, so tty(1) and \
            ttyname() find none; the caller's terminal is raw during the run and restored exactly after it); files, \
            pipes and /dev/null are reopened; sockets and the like are relayed through pipes.

            --json-status-fd FD: when the program ends, one line of JSON is written to \
            descriptor FD (then closed), with these stable fields: end (exited, signaled, \
            seccomp-violation, memory-limit, wall-clock-limit, killed, or not-started when \
            nothing ran), status (what exec exits with), pid (the sandbox's init on the host), \
            pidInside (the program's pid inside), exitCode (when it exited), signal (the signal \
            that ended it: 31 for a seccomp violation, 9 for a limit) and violation (the system \
            call the filter stopped, when it could be named); a field that does not apply is \
            left out. Example: extsandbox exec --json-status-fd 3 -- ./tool 3>status.json

            Exit status: the program's own (0 when it succeeded); 128+N when signal N killed \
            it (159 = SIGSYS for a seccomp violation, 137 = SIGKILL for a limit); 125 when the \
            sandbox could not be set up (nothing ran); 126 when PROGRAM was found but cannot be \
            run (not executable, a directory, not a program); 127 when PROGRAM (or the \
            interpreter its #! line names) was not found; 64 for a usage error.

            Loaded policies and their compiled seccomp filters are cached per user in \
            $XDG_CACHE_HOME/extsandbox (or ~/.cache/extsandbox) and reused only while every \
            policy file they were made from is byte-for-byte unchanged and every extends/include \
            name still finds the same file; EXTSANDBOX_NO_CACHE=1 turns the cache off.

            Examples:
              extsandbox exec -- sh -c 'echo hello from $(hostname)'
              extsandbox exec --ro-bind "$PWD" -- python3 script.py
              extsandbox exec --bind "$PWD:/work" -- make    # starts in /work
              extsandbox exec --policy ./my-policy.yaml --env DEBUG=1 -- ./tool --flag
            """)

    @Option(name: .long, help: ArgumentHelp(
        "Policy name (looked up in the policy directories; the admin's /etc/extsandbox/policies wins) or path to a .yaml file.",
        valueName: "name|path"), completion: CompletionCandidates.policy)
    var policy: String = "standard"

    @Option(name: .customLong("ro-bind"), help: ArgumentHelp(
        "Make host path SRC visible read-only at DST (default: the same path). Repeatable. SRC may pass through root-owned symlinks only (others, which a sandbox may have planted, are refused). Unix sockets under SRC still accept connect(): do not bind a daemon's socket directory.", valueName: "src[:dst]"),
        completion: .file())
    var readOnlyBinds: [String] = []

    @Option(name: .customLong("bind"), help: ArgumentHelp(
        "Make host path SRC visible read-write at DST (default: the same path). Repeatable. What the program creates there is owned by the caller, or by nobody (65534) when the caller is root, which must then be able to write there. SRC is resolved as for --ro-bind.", valueName: "src[:dst]"),
        completion: .file())
    var writableBinds: [String] = []

    @Option(name: .customLong("env"), help: ArgumentHelp(
        "Set an environment variable inside (after the policy's). Repeatable.", valueName: "key=value"))
    var environment: [String] = []

    @Option(name: .customLong("chdir"), help: ArgumentHelp(
        "Working directory inside the sandbox. Default: the current directory, at the path where a bind (--ro-bind, --bind or the policy's) shows it inside; else /, with a hint when an argument names a file in the current directory.",
        valueName: "dir"))
    var workingDirectory: String?

    @Option(name: .customLong("json-status-fd"), help: ArgumentHelp(
        "When the program ends (or cannot start), write one line of JSON to descriptor FD and close it: end, status, pid, pidInside, exitCode, signal, violation (see above).",
        valueName: "fd"))
    var statusDescriptor: Int32?

    @Flag(name: .long, help: ArgumentHelp(
        "Audit the seccomp policy: calls it would kill are allowed and listed at exit (isolation otherwise unchanged). The program runs WITHOUT the policy's kills: for writing policies, never for untrusted code."))
    var audit = false

    @Flag(name: .long, help: ArgumentHelp(
        "Print the sandbox's lifecycle on stderr: its launch (policy, the init's pid, the program's pid inside) and how it ended (exit, signal, seccomp violation with the syscall, limit hit)."))
    var verbose = false

    @Argument(parsing: .captureForPassthrough, help: ArgumentHelp(
        "The program and its arguments. Put `--` before them when they start with a dash.", valueName: "program [args…]"))
    var command: [String] = []

    func validate() throws {
        // Passthrough parsing captures a leading --help too; answer it as the user meant.
        if let first = command.first, first == "--help" || first == "-h" { throw CleanExit.helpRequest(self) }
        // Passthrough parsing also captures an option it does not know, and everything after it,
        // as the program: a mistyped option must not run as one.
        if let first = command.first, first.hasPrefix("-"), first != "--", first != "-" {
            throw ValidationError(Self.unknownOption(first))
        }
        if let problem = request.validationError { throw ValidationError(problem) }
    }

    static let optionNames = ["--policy", "--ro-bind", "--bind", "--env", "--chdir", "--json-status-fd", "--audit", "--verbose", "--help"]

    /// The usage error for `word`, an option `exec` does not have, with the nearest one it has.
    static func unknownOption(_ word: String) -> String {
        let name = String(word.prefix { $0 != "=" })
        let nearest = optionNames.map { ($0, editDistance(name, $0)) }.min { $0.1 < $1.1 }
        var message = "Unknown option '\(name)'."
        if let (option, distance) = nearest, distance <= max(2, name.count / 3) { message += " Did you mean '\(option)'?" }
        return message + " (A program whose name starts with a dash goes after `--`.)"
    }

    /// Levenshtein distance between `a` and `b`.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(b.count, 1) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    /// The parsed options, as ``ExecRequest/quickParse(_:)`` would give them.
    var request: ExecRequest {
        ExecRequest(
            policy: policy, readOnlyBinds: readOnlyBinds, writableBinds: writableBinds, environment: environment,
            workingDirectory: workingDirectory, audit: audit, verbose: verbose, statusDescriptor: statusDescriptor,
            words: command.first == "--" ? Array(command.dropFirst()) : command)
    }

    func run() throws {
        throw ExitCode(ExecRun.run(request))
    }
}
