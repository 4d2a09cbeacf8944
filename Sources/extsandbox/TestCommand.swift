import ArgumentParser
import FoundationEssentials
import Glibc

/// `extsandbox test BUNDLE|ID`: a conformance run for an extension author's CI.
struct TestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test",
        abstract: "Check that an extension behaves as a host expects, in its sandbox.",
        discussion: """
            Launches the extension as `extsandbox run` does (a host's launch path, the sandbox of \
            its point's security level or --policy) and checks, in order: its manifest; the \
            launch (READY with its identifier on fd 3); the handshake and protocol version; that \
            it accepts a connection; a round trip (--request, answered with a reply or an \
            error); a request with a file descriptor attached; a cancelled request; surviving \
            suspension (SIGSTOP of its whole sandbox while no connection is open) and resumption; \
            exiting promptly (exit 0 within the host's half-second grace) after the host's \
            GOODBYE; and no seccomp violation during the run. Then, as a block of its own, \
            whether it speaks typed calls (the call envelope's system target: a ping round trip \
            and an unknown method's error); a byte-level extension is reported as not typed, \
            which is no failure. Then a table of what its sandbox blocks. Each failure says what to change (docs/wire-protocol.md has the rules).

            A progress line is shown on a terminal while a check takes over a second.

            --json prints one object with these stable fields: extension, bundle, policy, \
            policy-origin, passed, checks (name; status: pass, fail or skip; milliseconds; \
            detail; fix) and blocks: what and sandbox (the table's row), and as fields: for a \
            syscall group, syscalls (how many) and actions (how many each action gets: kill, \
            allow, log, errno NAME, or conditional); for exec after start, allowed; network; \
            for the file system, readOnly, writable and tmpfs (destination, sizeBytes); for the \
            limits, memoryBytes, processes, openFiles, cpuSeconds, wallClockSeconds. A field \
            that does not apply is left out.

            Exit status: 0 when every check passed, 1 when one failed, 64 for a usage error, 130 \
            or 143 when interrupted.

            Examples:
              extsandbox test ./build/Upcase.appex --policy hardened
              extsandbox test org.example.upcase --json
            """)

    @Argument(help: ArgumentHelp("A bundle directory (NAME.appex) or an installed extension's identifier.", valueName: "BUNDLE|ID"),
              completion: CompletionCandidates.bundleOrIdentifier)
    var target: String

    @Option(help: ArgumentHelp("Test in this policy (a name or a path) instead of the point's security level.", valueName: "NAME"),
            completion: CompletionCandidates.policy)
    var policy: String?

    @Option(help: ArgumentHelp("The payload of the test requests.", valueName: "TEXT"))
    var request: String = "extsandbox-test"

    @Option(help: ArgumentHelp("Seconds to wait for READY, the handshake and each answer.", valueName: "SECONDS"))
    var timeout: Double = 5

    @Flag(help: "Print the result as one JSON object.")
    var json = false

    func validate() throws {
        guard timeout > 0, timeout.isFinite else { throw ValidationError("--timeout expects a number of seconds, more than 0.") }
    }

    func run() async throws {
        let progress = ConformanceProgress(enabled: !json && isatty(1) == 1)
        let run = ConformanceRun(argument: target, policy: policy, payload: request, timeout: timeout, progress: progress,
                                 printLive: !json)
        StopSignals.install { _ in await run.abandon() }
        let report = await run.perform()
        progress.stop()
        if StopSignals.isStopping { while true { try? await Task.sleep(for: .seconds(3600)) } }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            Output.unescapedLine(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            Output.line(report.typedCalls.block())
            Output.line(report.blocksTable())
            Output.line(report.summary)
        }
        if !report.passed { throw ExitCode.failure }
    }
}
