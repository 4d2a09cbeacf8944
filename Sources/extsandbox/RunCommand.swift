import SandboxExec
import ArgumentParser
import Dispatch
import ExtSandbox
import Glibc
import SandboxRuntime
import SandboxSystem
import Synchronization

/// `extsandbox run BUNDLE|ID`: launches an extension as a host would and talks to it.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Launch an extension as a host would, and send it requests.",
        discussion: """
            The extension is launched through the host API (AppExtensionProcess), in the sandbox \
            of its point's security level as its host declares it, or of --policy. An installed \
            extension (by identifier, as `extsandbox list` shows it) runs only if its host would \
            run it: approved (or bundled) and enabled. A bundle directory (NAME.appex) is run by \
            path, for its author: it must be valid, but needs no approval.

            With --send, each message is sent as a request, in order, and each reply printed on \
            its own line on standard output.

            Without --send, an interactive session: each line of standard input is a request \
            (one at a time: the next line is sent once the reply came), and the extension's own \
            requests, one-way messages and lifecycle events (launched, suspended, resumed, \
            interrupted with the reason) are printed as they happen. The session holds a \
            connection from the start, so the extension is never suspended while you type. \
            Lines starting with ':' are commands: :close (close the connection: the extension \
            is suspended, later terminated; the next request reconnects and resumes it), \
            :oneway TEXT, :help, :quit ('::' sends a line starting with ':'). \
            End of input, :quit or Ctrl-C ends the extension (GOODBYE, then SIGKILL after half \
            a second) and leaves nothing running.

            The extension's own requests are answered with error 2 (unknown request), as a host \
            without a request handler answers them.

            --json-status-fd FD: when the run ends, one line of JSON is written to descriptor \
            FD (then closed), with the fields of `extsandbox exec --json-status-fd`: end (how the \
            extension's last process ended: exited, signaled, seccomp-violation, memory-limit, \
            wall-clock-limit, killed; not-started when it could not be launched), status (what \
            run exits with), pid and pidInside (its sandbox's init on the host, its pid inside), \
            exitCode, signal, violation. Example: extsandbox run ./Echo.appex --send hi \
            --json-status-fd 3 3>status.json

            Exit status: 0 when every request got a reply, 1 when one got an error or none in \
            time (or the extension ended), 125 when the extension could not be launched, 64 for \
            a usage error, 130 or 143 when interrupted.

            Examples:
              extsandbox run ./Upcase.appex --policy hardened --send hello --send world
              extsandbox run org.example.upcase
            """)

    @Argument(help: ArgumentHelp("A bundle directory (NAME.appex) or an installed extension's identifier.", valueName: "BUNDLE|ID"),
              completion: CompletionCandidates.bundleOrIdentifier)
    var target: String

    @Option(help: ArgumentHelp("Run in this policy (a name or a path) instead of the point's security level.", valueName: "NAME"),
            completion: CompletionCandidates.policy)
    var policy: String?

    @Option(name: .customLong("send"), help: ArgumentHelp("Send MESSAGE as a request and print the reply (repeatable).", valueName: "MESSAGE"))
    var messages: [String] = []

    @Option(help: ArgumentHelp("Seconds to wait for each reply (0: no limit).", valueName: "SECONDS"))
    var timeout: Double = 30

    @Flag(help: "With --send: also print lifecycle events on standard error.")
    var verbose = false

    @Option(name: .customLong("json-status-fd"), help: ArgumentHelp(
        "When the run ends (or the extension cannot be launched), write one line of JSON to descriptor FD and close it: end, status, pid, pidInside, exitCode, signal, violation (see above).",
        valueName: "fd"))
    var statusDescriptor: Int32?

    func validate() throws {
        guard timeout >= 0, timeout.isFinite else { throw ValidationError("--timeout expects a number of seconds, 0 or more.") }
        if let descriptor = statusDescriptor, let problem = ExecStatus.descriptorProblem(descriptor) { throw ValidationError(problem) }
    }

    func run() async throws {
        let interactive = messages.isEmpty
        let statusDescriptor = StatusDescriptor(self.statusDescriptor)
        let target: RunTarget
        do {
            target = try await RunTarget.resolve(self.target, policy: policy)
        } catch {
            printError(TerminalText.escaped("\(error)"))
            statusDescriptor.write(ExecStatus(notStartedWith: 125))
            throw ExitCode(125)
        }
        let identifier = target.identity.bundleIdentifier
        let verbose = verbose
        let onEvent: @Sendable (AppExtensionLifecycleEvent) -> Void = { event in
            if interactive {
                Output.line("event: " + MessageText.describe(event))
            } else if verbose {
                printError("\(identifier): " + MessageText.describe(event))
            } else if case .interrupted(let reason) = event {
                printError("\(identifier) interrupted: \(reason)")
            }
        }
        let session: RunSession
        do {
            session = try await RunSession(target: target, onEvent: onEvent)
        } catch {
            target.close()
            printError("cannot launch \(identifier): \(error)", hint: ErrorAdvice.extensionLaunch(error))
            statusDescriptor.write(ExecStatus(notStartedWith: 125))
            throw ExitCode(125)
        }
        if interactive || verbose {
            // The bundle's path and the declared level are others' text: one line, escaped.
            let line = TerminalText.escaped(
                "running \(identifier) (\(target.bundlePath)) in the '\(target.identity.point.securityLevel)' sandbox (\(target.policyOrigin))")
            printError(interactive ? line + "; one request per line, :help for commands, Ctrl-D or Ctrl-C to end" : line)
        }
        let conversation = Conversation(session: session, timeout: timeout)
        // The sandbox of the extension's last process (a request after an interruption relaunches it).
        let ended: @Sendable (Termination, Int32) -> Void = { termination, status in
            let sandbox = session.process.sandbox
            statusDescriptor.write(ExecStatus(termination, pid: sandbox.pid, pidInside: sandbox.payloadPIDInside, status: status))
        }
        StopSignals.install { signal in
            let (termination, _) = await conversation.finish()
            printError("stopped: \(identifier) \(termination)")
            ended(termination, 128 + signal)
        }
        let status = interactive ? await conversation.interactive() : await conversation.send(messages)
        if StopSignals.isStopping { await Self.parkForever() }
        let (termination, _) = await conversation.finish()
        if interactive || verbose { printError("\(identifier) ended: \(termination)") }
        ended(termination, status)
        if status != 0 { throw ExitCode(status) }
    }

    /// A signal's stop is running and will exit the process.
    private static func parkForever() async -> Never {
        while true { try? await Task.sleep(for: .seconds(3600)) }
    }
}

/// The connection side of `run`: one connection at a time, made on demand.
final class Conversation: Sendable {
    let session: RunSession
    let timeout: Double
    private let connection = Mutex<ExtensionConnection?>(nil)
    private let finished = Mutex<(Termination, Duration)?>(nil)

    init(session: RunSession, timeout: Double) {
        self.session = session
        self.timeout = timeout
    }

    /// What `run` does with the extension's own requests and one-way messages: prints them, and
    /// answers requests as a host without a handler does (error 2).
    private var handlers: ExtensionConnection.Handlers {
        .init(onRequest: { message in
            Output.line("extension request: \(MessageText.render(message.payload, fileDescriptors: message.fileDescriptors.count)) (answered with error 2, unknown request)")
            message.closeFileDescriptors()
            throw ExtensionConnection.ExtensionFailure(code: 2, "extsandbox run answers no requests")
        }, onOneWay: { message in
            Output.line("extension one-way: \(MessageText.render(message.payload, fileDescriptors: message.fileDescriptors.count))")
            message.closeFileDescriptors()
        })
    }

    /// The open connection, or a new one (which resumes or relaunches the extension).
    func connected() async throws -> ExtensionConnection {
        if let open = connection.withLock({ $0 }), open.isOpen { return open }
        let made = try await session.process.makeConnection(handlers: handlers)
        connection.withLock { $0 = made }
        return made
    }

    /// Closes the connection (the extension is suspended when idle, later terminated).
    func closeConnection() {
        connection.withLock { current in
            current?.invalidate()
            current = nil
        }
    }

    /// The reply to `text`, or why there is none.
    func request(_ text: String) async -> Result<ExtensionMessage, any Error> {
        let connection: ExtensionConnection
        do {
            connection = try await connected()
        } catch {
            return .failure(error)
        }
        let message = ExtensionMessage(Array(text.utf8))
        guard timeout > 0 else {
            do { return .success(try await connection.send(message)) } catch { return .failure(error) }
        }
        let limit = timeout
        return await withTaskGroup(of: Result<ExtensionMessage, any Error>?.self) { group in
            group.addTask {
                do { return .success(try await connection.send(message)) } catch { return .failure(error) }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(limit))
                return Task.isCancelled ? nil : .failure(NoReply(seconds: limit))
            }
            var outcome: Result<ExtensionMessage, any Error> = .failure(NoReply(seconds: limit))
            for await result in group {
                guard let result else { continue }
                outcome = result
                break
            }
            group.cancelAll()  // a request still waiting is cancelled (CANCEL goes to the extension)
            return outcome
        }
    }

    struct NoReply: Error, CustomStringConvertible {
        var seconds: Double
        var description: String { "no reply within \(seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)) s (--timeout)" }
    }

    /// `--send`: each message in turn; the exit status.
    func send(_ messages: [String]) async -> Int32 {
        var status: Int32 = 0
        for text in messages {
            switch await request(text) {
            case .success(let reply):
                Output.line(MessageText.render(reply.payload, fileDescriptors: reply.fileDescriptors.count))
                reply.closeFileDescriptors()
            case .failure(let error):
                status = 1
                printError("request \(quoted(text)): " + TerminalText.escaped("\(error)"))
                // A broken connection or an ended extension: the rest would go to a fresh process.
                if !(error is NoReply), !isAnswer(error) { return status }
            }
        }
        return status
    }

    /// Whether `error` is the extension's own answer (an ERROR frame): the connection is fine.
    private func isAnswer(_ error: any Error) -> Bool {
        if case ExtensionError.remote = error { return true }
        return false
    }

    /// The interactive session, until end of input or :quit; the exit status. It holds a
    /// connection from the start, as a host with its extension's view on screen does: the
    /// extension is suspended only when the user closes it (:close), never while they type.
    func interactive() async -> Int32 {
        do {
            _ = try await connected()
        } catch {
            Output.line("connection failed: " + TerminalText.escaped("\(error)"))
        }
        let lines = StandardInputLines.start()
        for await line in lines {
            if line.hasPrefix(":") && !line.hasPrefix("::") {
                let words = line.dropFirst().split(separator: " ", maxSplits: 1)
                switch words.first.map(String.init) ?? "" {
                case "quit", "q":
                    break
                case "close":
                    closeConnection()
                    Output.line("closed the connection")
                    continue
                case "oneway":
                    let text = words.count > 1 ? String(words[1]) : ""
                    do {
                        try await connected().sendOneWay(ExtensionMessage(Array(text.utf8)))
                        Output.line("sent one-way: \(text)")
                    } catch {
                        Output.line("one-way failed: " + TerminalText.escaped("\(error)"))
                    }
                    continue
                default:
                    Output.line("commands: :close (close the connection), :oneway TEXT, :quit; '::' sends a line starting with ':'; any other line is a request")
                    continue
                }
                break
            }
            let text = line.hasPrefix("::") ? String(line.dropFirst()) : line
            switch await request(text) {
            case .success(let reply):
                Output.line("reply: \(MessageText.render(reply.payload, fileDescriptors: reply.fileDescriptors.count))")
                reply.closeFileDescriptors()
            case .failure(let error):
                Output.line("failed: " + TerminalText.escaped("\(error)"))
            }
        }
        return 0
    }

    /// Ends the extension (once): how it ended.
    func finish() async -> (Termination, Duration) {
        if let done = finished.withLock({ $0 }) { return done }
        closeConnection()
        let result = await session.end()
        session.target.close()
        finished.withLock { $0 = result }
        return result
    }

    private func quoted(_ text: String) -> String {
        text.count > 40 ? "'\(text.prefix(40))…'" : "'\(text)'"
    }
}

/// Standard input's lines, read on a thread of their own (a blocking read must not hold one of
/// the concurrency pool's few threads).
enum StandardInputLines {
    static func start() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        DispatchQueue(label: "extsandbox.run.stdin").async {
            while let line = readLine(strippingNewline: true) { continuation.yield(line) }
            continuation.finish()
        }
        return stream
    }
}
