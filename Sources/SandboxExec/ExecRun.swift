import Glibc
import PolicyTools
import SandboxPolicy
import SandboxRuntime
import SandboxSystem

/// Why a one-shot `exec` ran nothing, as the status it exits with: 125 when the sandbox could
/// not be set up, 126 when the program cannot be run, 127 when it was not found (see `exec --help`).
struct ExecExit: Error, Equatable {
    let status: Int32
    init(_ status: Int32) { self.status = status }
}

/// A `--bind`/`--ro-bind` argument that is not `SRC[:DST]`.
struct BindSpecError: Error, Equatable {
    let message: String
}

/// `extsandbox exec`'s run, shared by the `extsandbox` binary (which runs the common shapes
/// of `exec` itself, without ArgumentParser) and `extsandbox-commands` (everything else).
package enum ExecRun {
    /// Runs the request to its end and returns the status to exit with: the program's (or 128 +
    /// the signal that ended it), or 125, 126, 127 when nothing could run (said on stderr).
    ///
    /// Synchronous, on the calling thread (the main thread): it waits for the spawner thread,
    /// the sandbox's report and its end blocked, each woken directly by the thread that has the
    /// news, so a run starts no thread of Swift concurrency or Dispatch and hands nothing over
    /// between them.
    package static func run(_ request: ExecRequest) -> Int32 {
        unblockHandledSignals()  // before the supervisor's threads start: they inherit the mask
        // Ours alone: the sandbox never gets it (the spawner closes what it does not pass, too).
        if let descriptor = request.statusDescriptor { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        do {
            return try runProgram(request)
        } catch {
            if let descriptor = request.statusDescriptor { ExecStatus(notStartedWith: error.status).write(to: descriptor) }
            return error.status
        }
    }

    /// Runs the request (``run(_:)``) and exits with its status. Nothing is left to clean up then
    /// (the sandbox, its cgroups and fds are gone once `run` returns), so the exit skips the
    /// process's exit-time teardown.
    package static func runAndExit(_ request: ExecRequest) -> Never {
        let status = run(request)
        fflush(nil)
        _exit(status)
    }

    /// Runs the program to its end: its exit status; throws ``ExecExit`` when it could not run.
    private static func runProgram(_ request: ExecRequest) throws(ExecExit) -> Int32 {
        let words = request.words
        let program = words[0]
        // Read once: the program lookup, the policy search path and the cache use it too.
        let callerEnvironment = SystemFiles.environment()
        guard let executable = Self.resolve(program, searchPath: callerEnvironment["PATH"]) else {
            // A shell's 126: the named file is there but the caller may not run it.
            if FilePaths.containsSlash(program), SystemFiles.kind(of: Self.absolute(program)) != nil {
                printError("\(program): permission denied (not executable)", hint: "make it executable (chmod +x) or run its interpreter on it")
                throw ExecExit(126)
            }
            printError("\(program): command not found",
                       hint: FilePaths.containsSlash(program) ? "check the path and that it is executable" : "give its path (./\(program)) or add its directory to PATH")
            throw ExecExit(127)
        }

        let loadedPolicy: Policy
        let filter: CompiledSeccompFilter
        do throws(PolicyError) {
            (loadedPolicy, filter) = try Self.loadPolicy(request.policy, environment: callerEnvironment)
        } catch {
            printError("policy: \(error)", hint: ErrorAdvice.policy(error, nameOrPath: request.policy))
            throw ExecExit(125)
        }

        var mounts: [MountEntry] = []
        do {
            for spec in request.readOnlyBinds { mounts.append(try Self.bind(spec, writable: false)) }
            for spec in request.writableBinds { mounts.append(try Self.bind(spec, writable: true)) }
        } catch {
            Self.complain(error.message)
            throw ExecExit(125)
        }
        var overrides: [String: String] = [:]
        for item in request.environment {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            overrides[String(parts[0])] = String(parts[1])
        }

        var configuration = SandboxConfiguration(
            executable: executable, arguments: words,
            environment: SandboxEnvironment.compose(policy: loadedPolicy, caller: callerEnvironment, overrides: overrides),
            policy: loadedPolicy, extraMounts: mounts,
            workingDirectory: request.workingDirectory ?? Self.startingDirectory(policy: loadedPolicy, mounts: mounts, words: words))
        configuration.compiledFilter = filter
        configuration.auditSeccomp = request.audit
        // Never the caller's own open files: see SandboxStreams (a terminal becomes a relayed pty).
        let streams: SandboxStreams
        do {
            streams = try SandboxStreams()
        } catch {
            Self.complain("standard streams: \(error)")
            throw ExecExit(125)
        }
        (configuration.standardInput, configuration.standardOutput, configuration.standardError) = (streams.stream(0), streams.stream(1), streams.stream(2))
        configuration.controllingTerminal = streams.hasTerminal
        if request.audit { Self.complain(Self.auditWarning(policy: loadedPolicy.name)) }

        let process: SandboxedProcess
        do {
            process = try Supervisor.shared.launchBlocking(configuration)
        } catch {
            streams.abandon()
            printError("cannot start \(program): \(error)", hint: ErrorAdvice.launch(error))
            throw ExecExit(Self.launchFailureStatus(error))
        }

        if request.verbose {
            Self.complain("launched \(executable) in a '\(loadedPolicy.name)' sandbox (init pid \(process.pid), program pid \(process.payloadPIDInside) inside)")
        }
        var forwarding: ForwardedSignals.Forwarding?
        do {
            forwarding = try ForwardedSignals.forward(to: process, on: Supervisor.shared.monitor)
            try streams.launched()  // raw mode from here: the CLI now outlives the forwarded signals
        } catch {
            forwarding?.stop()
            process.kill()
            _ = process.waitForExitBlocking()
            streams.finish()
            Self.complain("cannot relay the standard streams of \(program): \(error)")
            throw ExecExit(125)
        }
        let termination = process.waitForExitBlocking()
        streams.finish()
        forwarding?.stop()
        switch termination {
        case .exited, .signaled:
            if request.verbose { Self.complain("\(executable) ended: \(termination)") }
        default:
            Self.complain("\(executable) killed: \(termination)")
        }
        if request.audit {
            let denied = process.auditedSyscalls
            Self.complain(denied.isEmpty
                ? "audit: the policy '\(loadedPolicy.name)' would have denied nothing"
                : "audit: the policy '\(loadedPolicy.name)' would have denied: \(denied.joined(separator: " "))")
        }
        if let descriptor = request.statusDescriptor {
            ExecStatus(termination, pid: process.pid, pidInside: process.payloadPIDInside).write(to: descriptor)
        }
        return termination.shellExitCode
    }

    /// Without --chdir: the caller's directory where the sandbox shows it, else / (with a hint
    /// when the arguments evidently name files there).
    static func startingDirectory(policy: Policy, mounts: [MountEntry], words: [String]) -> String {
        guard let here = SystemFiles.currentDirectory() else { return "/" }
        if let inside = StartingDirectory.visiblePath(
            of: here, mounts: policy.filesystem.mounts + mounts, masked: policy.filesystem.masked) {
            let top = StartingDirectory.deepestBindSource(covering: here, mounts: policy.filesystem.mounts + mounts)
            if StartingDirectory.sandboxUserCanEnter(here, below: top) { return inside }
            printError("hint: the current directory \(here) is visible inside at \(inside), but the sandbox's user (nobody, " +
                       "65534, as you run as root) cannot enter it, so the program starts in /; make it and the directories " +
                       "from \(top) down to it searchable by others (chmod o+x), or choose a directory with --chdir")
            return "/"
        }
        if let hint = StartingDirectory.hint(hostDirectory: here, arguments: words.dropFirst()) {
            printError("hint: " + hint)
        }
        return "/"
    }

    /// Printed before an audited run: the seccomp policy's kills are off for it.
    static func auditWarning(policy: String) -> String {
        "warning: --audit: the program runs WITHOUT the kills of its seccomp policy '\(policy)': every call the policy " +
            "would kill is allowed and only reported at exit, so the program can do what the policy forbids. " +
            "Use --audit only to write policies, never to run untrusted code."
    }

    /// The policy and its filter: from the user's cache when nothing they were made from
    /// changed, else loaded and compiled (and cached for next time).
    static func loadPolicy(_ nameOrPath: String, environment: [String: String]) throws(PolicyError) -> (Policy, CompiledSeccompFilter) {
        let searchPath = PolicySearchPath.default(executablePath: PolicySearchPath.currentExecutable(), environment: environment)
        let store = PolicyStore(diskLayer: PolicyDiskCache.forCurrentUser(environment: environment))
        return try store.compiled(nameOrPath: nameOrPath, searchPath: searchPath)
    }

    static func bind(_ spec: String, writable: Bool) throws(BindSpecError) -> MountEntry {
        let parts = spec.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard let first = parts.first, !first.isEmpty else {
            throw BindSpecError(message: "--\(writable ? "bind" : "ro-bind") expects SRC[:DST], got '\(spec)'.")
        }
        let source = Self.absolute(first)
        let destination = parts.count > 1 && !parts[1].isEmpty ? parts[1] : source
        return .bind(source: source, destination: destination, writable: writable, optional: false)
    }

    static func absolute(_ path: String) -> String {
        if FilePaths.isAbsolute(path) { return path }
        return FilePaths.join(SystemFiles.currentDirectory() ?? "/", path)
    }

    /// What a failed launch exits with: as a shell, 127 when the program's `execve` found no
    /// file (a missing interpreter) and 126 when it found one it cannot run (a directory, no
    /// permission, not a program); 125 when the sandbox itself could not be set up.
    static func launchFailureStatus(_ error: SandboxError) -> Int32 {
        guard error.step == .exec else { return 125 }
        return error.errorNumber == ENOENT ? 127 : 126
    }

    /// Like a shell: a name with a slash is a path, anything else is looked up in `searchPath`
    /// (the caller's PATH).
    static func resolve(_ program: String, searchPath: String?) -> String? {
        if FilePaths.containsSlash(program) {
            let path = absolute(program)
            return access(path, X_OK) == 0 ? path : nil
        }
        for directory in FilePaths.searchList(searchPath ?? "/usr/local/bin:/usr/bin:/bin") {
            let candidate = FilePaths.join(directory, program)
            if SystemFiles.kind(of: candidate) == S_IFREG, access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    static func complain(_ message: String) { printError(message) }
}
