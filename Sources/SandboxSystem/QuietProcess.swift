import Glibc

/// A helper program started with /dev/null as its standard streams: its output is not ours to
/// show (mke2fs making a container's image, bubblewrap as the benchmark's reference).
package enum QuietProcess {
    /// Starts `argv` (`argv[0]` an absolute path) with `environment` (`nil`: this process's).
    package static func start(_ argv: [String], environment: [String]? = nil) -> Result<pid_t, Errno> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let arguments = argv.map { strdup($0) } + [nil]
        defer { arguments.forEach { free($0) } }
        var pid: pid_t = 0
        let rc: Int32
        if let environment {
            let variables = environment.map { strdup($0) } + [nil]
            defer { variables.forEach { free($0) } }
            rc = posix_spawn(&pid, argv[0], &actions, nil, arguments, variables)
        } else {
            rc = posix_spawn(&pid, argv[0], &actions, nil, arguments, environ)
        }
        return rc == 0 ? .success(pid) : .failure(Errno(rc))
    }

    /// Runs `argv` to its end: its exit status, or -1 when it could not start or was killed.
    package static func run(_ argv: [String], environment: [String]? = nil) -> Int32 {
        guard case .success(let pid) = start(argv, environment: environment) else { return -1 }
        var status: Int32 = 0
        _ = retryingInterrupts { waitpid(pid, &status, 0) }
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    }
}
