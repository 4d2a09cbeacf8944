@testable import SandboxExec
import Foundation
import Glibc
import Testing
import TestSupport

/// Runs the CLI the way a person does: on a terminal (a pseudo-terminal this harness owns, the
/// CLI's controlling terminal, its session's foreground job), and looks at that terminal from
/// the outside before and after. Python's pty and termios modules do the terminal work.
enum TerminalHarness {
    /// The harness script: spec in $XSB_PTY_SPEC (argv, steps), a JSON report on stdout.
    static let script = #"""
        import fcntl, json, os, select, signal, struct, sys, termios, time
        spec = json.loads(os.environ["XSB_PTY_SPEC"])
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        def attempt(f):
            try: return f()
            except Exception as e: return "error: " + str(e)
        def state():
            return {
                "size": attempt(lambda: list(struct.unpack("HHHH", fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8))[:2])),
                "exclusive": attempt(lambda: struct.unpack("i", fcntl.ioctl(slave, 0x80045440, b"\0" * 4))[0]),  # TIOCGEXCL
                "ldisc": attempt(lambda: struct.unpack("i", fcntl.ioctl(slave, termios.TIOCGETD, b"\0" * 4))[0]),
                "attrs": attempt(lambda: repr(termios.tcgetattr(slave))),
                "echo": attempt(lambda: bool(termios.tcgetattr(slave)[3] & termios.ECHO)),
            }
        before = state()
        pid = os.fork()
        if pid == 0:
            os.close(master)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2): os.dup2(slave, fd)
            if spec.get("stdin") == "null": os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
            os.execv(spec["argv"][0], spec["argv"])
        output, steps, status, snapshots = b"", list(spec.get("steps", [])), None, []
        deadline = time.time() + 30
        while time.time() < deadline:
            if steps and steps[0]["wait"].encode() in output:
                step = steps.pop(0)
                if "send" in step: os.write(master, step["send"].encode())
                if "resize" in step: fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", step["resize"][0], step["resize"][1], 0, 0))
                if "signal" in step: time.sleep(0.3); os.kill(pid, step["signal"])  # once the CLI handles it
                if "snapshot" in step: time.sleep(0.3); snapshots.append(state())
                continue
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try: output += os.read(master, 4096)
                except OSError: ready = []
            if status is None:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done == pid: status = os.waitstatus_to_exitcode(code)
            if status is not None and not ready: break
        if status is None:
            os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0); status = "timed out"
        print(json.dumps({"before": before, "after": state(), "snapshots": snapshots, "output": output.decode(errors="replace"), "status": status}))
        """#

    struct Report {
        var before: [String: Any]
        var after: [String: Any]
        /// The terminal's state at each snapshot step.
        var snapshots: [[String: Any]] = []
        var output: String
        /// The CLI's exit code, or minus the signal that ended it.
        var status: Int?
        var raw: String

        /// What of the terminal differs after the run (settings, window size, exclusive mode,
        /// line discipline), described; empty when nothing does.
        var changes: [String] {
            ["attrs", "size", "exclusive", "ldisc"].compactMap { key in
                let old = "\(before[key] ?? "none")", new = "\(after[key] ?? "none")"
                return old == new ? nil : "\(key): \(old) -> \(new)"
            }
        }
        var echoAfter: Bool { after["echo"] as? Bool ?? false }
    }

    struct Step {
        var wait: String
        var send: String? = nil
        var resize: (Int, Int)? = nil
        var signal: Int32? = nil
        var snapshot = false
        var json: [String: Any] {
            var object: [String: Any] = ["wait": wait]
            if let send { object["send"] = send }
            if let resize { object["resize"] = [resize.0, resize.1] }
            if let signal { object["signal"] = Int(signal) }
            if snapshot { object["snapshot"] = true }
            return object
        }
    }

    static let python = "/usr/bin/python3"

    /// `extsandbox exec --policy standard.yaml [options] -- argv…` on a fresh terminal.
    static func exec(_ argv: [String], options: [String] = [], steps: [Step] = [], stdin: String? = nil,
                     as caller: Fixtures.Caller = .root) async throws -> Report {
        var command = [Fixtures.cli, "exec", "--policy", Fixtures.policyPath(for: caller)] + options + ["--"] + argv
        if caller == .nobody { command = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + command }
        var spec: [String: Any] = ["argv": command, "steps": steps.map(\.json)]
        if let stdin { spec["stdin"] = stdin }
        let specText = String(decoding: try JSONSerialization.data(withJSONObject: spec), as: UTF8.self)
        var environment = ProcessInfo.processInfo.environment
        environment["XSB_PTY_SPEC"] = specText
        let result = try await Fixtures.run([python, "-c", script], environment: environment)
        guard let object = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] else {
            return Report(before: [:], after: [:], output: "", status: nil, raw: "harness: \(result.stdout) \(result.stderr)")
        }
        return Report(
            before: object["before"] as? [String: Any] ?? [:], after: object["after"] as? [String: Any] ?? [:],
            snapshots: object["snapshots"] as? [[String: Any]] ?? [], output: object["output"] as? String ?? "",
            status: object["status"] as? Int, raw: result.stdout)
    }
}

@Suite("CLI: a terminal on stdio is relayed through a pseudo-terminal of the CLI's")
struct TerminalRelayTests {
    @Test("nothing a program does to its terminal reaches the caller's: settings, echo, window size, exclusive mode, line discipline",
          arguments: Fixtures.Caller.allCases)
    func callerTerminalUntouched(caller: Fixtures.Caller) async throws {
        // The line discipline goes last: N_NULL swallows everything written after it.
        let script = """
            stty -echo -icanon; stty rows 5 cols 7; stty size; echo changed
            /usr/bin/python3 -c 'import fcntl, struct, termios; fcntl.ioctl(0, termios.TIOCEXCL); fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 27))'
            """
        let report = try await TerminalHarness.exec(["/bin/sh", "-c", script], as: caller)
        #expect(report.status == 0, "\(report.raw)")
        #expect(report.output.contains("5 7\r\nchanged"), "the program saw its own changes: \(report.raw)")
        #expect(report.changes.isEmpty, "\(report.changes)")
        #expect(report.echoAfter, "echo is on again after the run: \(report.raw)")
    }

    @Test("input and output flow both ways; the program's exit status is kept")
    func inputAndOutput() async throws {
        let report = try await TerminalHarness.exec(["/bin/sh", "-c", "echo ready; read x; echo got $x; exit 7"],
                                              steps: [.init(wait: "ready", send: "hello\r")])
        #expect(report.status == 7, "\(report.raw)")
        #expect(report.output.contains("got hello"), "\(report.raw)")
        #expect(report.changes.isEmpty, "\(report.changes)")

        // Everything written before the exit arrives: the relay drains the pty.
        let many = try await TerminalHarness.exec(["/usr/bin/seq", "1", "30000"])
        #expect(many.status == 0, "\(many.raw.prefix(500))")
        #expect(many.output.hasPrefix("1\r\n2\r\n") && many.output.hasSuffix("\r\n29999\r\n30000\r\n"), "\(many.output.suffix(100))")
    }

    @Test("the pty is the program's controlling terminal: the window size is copied and forwarded, Ctrl-C interrupts")
    func controllingTerminal() async throws {
        let resized = try await TerminalHarness.exec(
            ["/bin/sh", "-c", "stty size; trap 'stty size; exit 3' WINCH; echo ready; while :; do sleep 0.1; done"],
            steps: [.init(wait: "ready", resize: (40, 120))])
        #expect(resized.status == 3, "\(resized.raw)")
        #expect(resized.output.contains("24 80\r\nready\r\n40 120"), "\(resized.raw)")

        let interrupted = try await TerminalHarness.exec(
            ["/bin/sh", "-c", "trap 'echo caught; exit 4' INT; echo ready; while :; do sleep 0.1; done"],
            steps: [.init(wait: "ready", send: "\u{3}")])
        #expect(interrupted.status == 4, "\(interrupted.raw)")
        #expect(interrupted.output.contains("caught"), "\(interrupted.raw)")
        #expect(interrupted.changes.isEmpty, "\(interrupted.changes)")
    }

    @Test("the caller's terminal is restored however the run ends")
    func restoredOnEveryExit() async throws {
        let loop = ["/bin/sh", "-c", "echo ready; while :; do sleep 0.1; done"]
        let cases: [(String, TerminalHarness.Report, Int)] = [
            ("seccomp kill", try await TerminalHarness.exec([Fixtures.probe, "bpf"]), 159),
            ("launch failure", try await TerminalHarness.exec(["/bin/true"], options: ["--bind", "/no/such/dir-xsb"]), 125),
            ("SIGTERM to the CLI", try await TerminalHarness.exec(loop, steps: [.init(wait: "ready", signal: SIGTERM)]), 143),
            ("SIGHUP to the CLI", try await TerminalHarness.exec(loop, steps: [.init(wait: "ready", signal: SIGHUP)]), 129),
            ("SIGUSR1 kills the CLI", try await TerminalHarness.exec(loop, steps: [.init(wait: "ready", signal: SIGUSR1)]), -Int(SIGUSR1)),
            ("stdin not a terminal", try await TerminalHarness.exec(["/bin/sh", "-c", "stty -opost <&1; echo out"], stdin: "null"), 0),
        ]
        for (name, report, status) in cases {
            #expect(report.status == status, "\(name): \(report.raw)")
            #expect(report.changes.isEmpty, "\(name): \(report.changes)")
            #expect(report.echoAfter, "\(name): \(report.raw)")
        }
    }
}

extension TerminalRelayTests {
    @Test("a job-control stop of the CLI gives the caller's terminal back as it was; continuing makes it raw again")
    func stopAndContinue() async throws {
        let report = try await TerminalHarness.exec(
            ["/bin/sh", "-c", "echo ready; read x; echo got $x"],
            steps: [
                .init(wait: "ready", snapshot: true),
                .init(wait: "", signal: SIGTSTP), .init(wait: "", snapshot: true),
                .init(wait: "", signal: SIGCONT), .init(wait: "", snapshot: true),
                .init(wait: "", send: "hello\r"),
            ])
        #expect(report.status == 0, "\(report.raw)")
        #expect(report.output.contains("got hello"), "\(report.raw)")
        let echo = report.snapshots.map { $0["echo"] as? Bool }
        #expect(echo == [false, true, false], "raw while running, restored while stopped, raw again: \(report.raw)")
        #expect(report.snapshots.count == 3 && "\(report.snapshots[1]["attrs"] ?? "")" == "\(report.before["attrs"] ?? "none")", "\(report.raw)")
        #expect(report.changes.isEmpty, "\(report.changes)")
    }
}

@Suite("CLI: the sandbox never shares the caller's open file descriptions")
struct StandardStreamTests {
    /// Sets O_NONBLOCK on the program's fd 0 from inside.
    static let setNonBlocking = "/usr/bin/python3 -c 'import fcntl, os; fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)'"
    static let isNonBlocking = "/usr/bin/python3 -c 'import fcntl, os; print(\"nonblocking\" if fcntl.fcntl(0, fcntl.F_GETFL) & os.O_NONBLOCK else \"blocking\")'"

    @Test("O_NONBLOCK set inside stays off the caller's stdin: a pipe, a regular file, /dev/null")
    func nonBlockingStaysInside() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-stdin-\(getpid())").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("x\n".utf8))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let cli = "\(Fixtures.cli) exec --policy \(Fixtures.standardPolicyPath) -- /bin/sh -c \"\(Self.setNonBlocking)\""
        for source in ["sleep 3 |", ": |", "< \(file)", "< /dev/null"] {
            let script = source.hasPrefix("<") ? "{ \(cli); \(Self.isNonBlocking); } \(source)" : "\(source) { \(cli); \(Self.isNonBlocking); }"
            let result = try await Fixtures.run(["/bin/sh", "-c", script])
            #expect(result.stdout == "blocking\n", "\(source): \(result.stdout) \(result.stderr)")
        }
    }

    @Test("a socket on stdio is relayed through pipes: data flows both ways, O_NONBLOCK stays inside")
    func socketRelayed() async throws {
        let script = """
            import fcntl, os, socket, subprocess, sys
            inner, outer = socket.socketpair()
            outer.sendall(b"hello\\n"); outer.shutdown(socket.SHUT_WR)
            status = subprocess.run(sys.argv[1:], stdin=inner, stdout=inner).returncode
            inner.close()
            print(outer.makefile().read().strip(), status, "nonblocking" if fcntl.fcntl(outer.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK else "blocking")
            """
        // The socketpair's ends share no description: check the CLI's end from the inside
        // program's view of the caller, through a second run reading the flags of fd 0.
        let result = try await Fixtures.run([TerminalHarness.python, "-c", script, Fixtures.cli, "exec", "--policy", Fixtures.standardPolicyPath,
                                       "--", "/bin/sh", "-c", "read x; echo got $x; \(Self.setNonBlocking)"])
        #expect(result.stdout == "got hello 0 blocking\n", "\(result.stdout) \(result.stderr)")

        let count = """
            import socket, subprocess, sys
            inner, outer = socket.socketpair()
            child = subprocess.Popen(sys.argv[1:], stdout=inner)
            inner.close()
            lines = len(outer.makefile().read().splitlines())
            print(lines, child.wait())
            """
        let many = try await Fixtures.run([TerminalHarness.python, "-c", count, Fixtures.cli, "exec", "--policy", Fixtures.standardPolicyPath,
                                     "--", "/usr/bin/seq", "1", "200000"])
        #expect(many.stdout == "200000 0\n", "all the output is drained: \(many.stdout) \(many.stderr)")

        let flags = """
            import fcntl, os, socket, subprocess, sys
            inner, outer = socket.socketpair()
            subprocess.run(sys.argv[1:], stdin=inner)
            print("nonblocking" if fcntl.fcntl(inner.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK else "blocking")
            """
        let second = try await Fixtures.run([TerminalHarness.python, "-c", flags, Fixtures.cli, "exec", "--policy", Fixtures.standardPolicyPath,
                                       "--", "/bin/sh", "-c", Self.setNonBlocking])
        #expect(second.stdout == "blocking\n", "\(second.stdout) \(second.stderr)")
    }

    @Test("files keep shell semantics: offsets carry over, 2>&1 stays one description")
    func fileOffsets() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-offsets-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = FileManager.default.createFile(atPath: directory + "/in", contents: Data("first\nsecond\n".utf8))
        let cli = "\(Fixtures.cli) exec --policy \(Fixtures.standardPolicyPath) --"
        let script = """
            cd \(directory)
            { \(cli) /bin/sh -c 'read x; echo inside $x'; read y; echo outside $y; } < in > out1
            { echo a; \(cli) /bin/echo b; echo c; } > out2
            \(cli) /bin/sh -c 'echo one; echo two >&2; echo three' > out3 2>&1
            cat out1 out2 out3
            """
        let result = try await Fixtures.run(["/bin/sh", "-c", script])
        #expect(result.stdout == "inside first\noutside second\na\nb\nc\none\ntwo\nthree\n", "\(result.stdout) \(result.stderr)")
    }
}

@Suite("CLI: --audit")
struct AuditWarningTests {
    @Test("--audit warns before the run that the policy's kills are off")
    func warns() async throws {
        let result = try await Fixtures.exec(["/bin/true"], options: ["--audit"])
        #expect(result.status == 0, "\(result.stderr)")
        let warning = result.stderr.split(separator: "\n").first.map(String.init) ?? ""
        #expect(warning.contains("WITHOUT the kills of its seccomp policy 'standard'"), "\(result.stderr)")
        #expect(warning.contains("never to run untrusted code"), "\(result.stderr)")
    }
}

@Suite("CLI: --verbose")
struct VerboseTests {
    @Test("--verbose prints the launch (policy, pids) and how the sandbox ended; quiet without it")
    func lifecycleOnStderr() async throws {
        let ran = try await Fixtures.exec(["/bin/sh", "-c", "exit 3"], options: ["--verbose"])
        #expect(ran.status == 3, "\(ran.stderr)")
        #expect(ran.stderr.contains("launched /bin/sh in a 'standard' sandbox (init pid "), "\(ran.stderr)")
        #expect(ran.stderr.contains("/bin/sh ended: exited with status 3"), "\(ran.stderr)")
        let killed = try await Fixtures.exec(["/usr/bin/env", "true"], options: ["--verbose", "--policy", "restricted"])
        #expect(killed.stderr.contains("launched /usr/bin/env in a 'restricted' sandbox"), "\(killed.stderr)")
        let quiet = try await Fixtures.exec(["/bin/true"])
        #expect(!quiet.stderr.contains("launched"), "\(quiet.stderr)")
    }
}

@Suite("CLI: /dev/tty inside is the relayed terminal")
struct DevTTYTests {
    @Test("with a terminal, /dev/tty reaches it", arguments: Fixtures.Caller.allCases)
    func devTTYReachesTheTerminal(caller: Fixtures.Caller) async throws {
        let report = try await TerminalHarness.exec(["/bin/sh", "-c", "echo through-dev-tty > /dev/tty && echo written"], as: caller)
        #expect(report.status == 0, "\(report.raw)")
        #expect(report.output.contains("through-dev-tty\r\nwritten"), "\(report.raw)")
    }

    @Test("without a terminal there is no /dev/tty")
    func noTerminalNoDevTTY() async throws {
        let result = try await Fixtures.exec(["/bin/sh", "-c", "if [ -e /dev/tty ]; then echo present; else echo absent; fi"])
        #expect(result.status == 0 && result.stdout == "absent\n", "\(result.stdout) \(result.stderr)")
    }
}
