import Glibc
import SandboxRuntime
import SandboxSystem
import Synchronization

/// What `exec --json-status-fd N` (and `run`'s) writes to descriptor N: one JSON object on one
/// line, once the program has ended (or once it is clear it will not run), so that a script
/// learns how it ended without parsing the CLI's messages. The field names are stable (see
/// `exec --help`).
package struct ExecStatus: Equatable {
    /// exited, signaled, seccomp-violation, memory-limit, wall-clock-limit, killed, or not-started.
    package var end: String
    /// The status the command exits with: for `exec` the shell's view of the program's end (the
    /// code, or 128 + the signal); for `run` its own (0, 1, 130, 143).
    package var status: Int32
    /// The sandbox's init on the host (what to signal), and the program's pid inside.
    package var pid: Int32?
    package var pidInside: Int32?
    /// The program's exit code, when it exited.
    package var exitCode: Int32?
    /// The signal that ended it (SIGSYS for a seccomp violation, SIGKILL for a limit).
    package var signal: Int32?
    /// The system call the seccomp filter stopped, when it could be named.
    package var violation: String?

    /// How `termination` ended the program of the sandbox whose init is `pid`; the command exits
    /// with `status` (by default the shell's view of the termination).
    package init(_ termination: Termination, pid: Int32, pidInside: Int32, status: Int32? = nil) {
        (self.pid, self.pidInside, self.status) = (pid, pidInside, status ?? termination.shellExitCode)
        switch termination {
        case .exited(let code): (end, exitCode) = ("exited", code)
        case .signaled(let number): (end, signal) = ("signaled", number)
        case .seccompViolation(let name): (end, signal, violation) = ("seccomp-violation", SIGSYS, name)
        case .memoryLimitExceeded: (end, signal) = ("memory-limit", SIGKILL)
        case .wallClockLimitExceeded: (end, signal) = ("wall-clock-limit", SIGKILL)
        case .killed: (end, signal) = ("killed", SIGKILL)
        }
    }

    /// Nothing ran: the sandbox could not be set up (125), the program could not be run (126) or was
    /// not found (127).
    package init(notStartedWith status: Int32) {
        (end, self.status) = ("not-started", status)
    }

    /// The object as one line of JSON: its fields in the order of their names, a field that
    /// does not apply left out.
    package var line: String {
        var fields: [(String, String)] = [("end", Self.quoted(end))]
        if let exitCode { fields.append(("exitCode", String(exitCode))) }
        if let pid { fields.append(("pid", String(pid))) }
        if let pidInside { fields.append(("pidInside", String(pidInside))) }
        if let signal { fields.append(("signal", String(signal))) }
        fields.append(("status", String(status)))
        if let violation { fields.append(("violation", Self.quoted(violation))) }
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}\n"
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped.
    package static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{8}": out += "\\b"
            case "\u{c}": out += "\\f"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// Writes the line to `descriptor` and closes it (its reader then sees end of file).
    package func write(to descriptor: Int32) {
        writeAll(descriptor, Array(line.utf8))
        close(descriptor)
    }

    /// Why `descriptor` cannot take the status line, in the words of a usage error.
    package static func descriptorProblem(_ descriptor: Int32) -> String? {
        guard descriptor < 3 || fcntl(descriptor, F_GETFD) < 0 else { return nil }
        return "--json-status-fd expects an open file descriptor above 2 (as in 3>status.json), got \(descriptor)."
    }
}

/// The descriptor of `--json-status-fd`, written once: `run` may end on its own and on a
/// signal at the same time.
package final class StatusDescriptor: Sendable {
    private let descriptor: Mutex<Int32?>

    /// Takes `descriptor` (nil: no status wanted), close-on-exec: a sandbox never gets it.
    package init(_ descriptor: Int32?) {
        if let descriptor { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        self.descriptor = Mutex(descriptor)
    }

    /// Writes `status` and closes the descriptor, the first time only.
    package func write(_ status: ExecStatus) {
        guard let descriptor = descriptor.withLock({ taken in defer { taken = nil }; return taken }) else { return }
        status.write(to: descriptor)
    }
}
