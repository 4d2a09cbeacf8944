import ArgumentParser
import ExtSandbox
import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxRuntime
import Synchronization

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
            GOODBYE; and no seccomp violation during the run. Then a table of what its sandbox \
            blocks. Each failure says what to change (docs/wire-protocol.md has the rules).

            Exit status: 0 when every check passed, 1 when one failed, 130 or 143 when \
            interrupted. A progress line is shown on a terminal while a check takes over a \
            second.

            Examples:
              extsandbox test ./build/Upcase.appex --policy hardened
              extsandbox test org.example.upcase --json
            """)

    @Argument(help: ArgumentHelp("A bundle directory (NAME.appex) or an installed extension's identifier.", valueName: "BUNDLE|ID"))
    var target: String

    @Option(help: ArgumentHelp("Test in this policy (a name or a path) instead of the point's security level.", valueName: "NAME"))
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
        let progress = Progress(enabled: !json && isatty(1) == 1)
        let run = ConformanceRun(argument: target, policy: policy, payload: request, timeout: timeout, progress: progress,
                                 printLive: !json)
        StopSignals.install { await run.abandon() }
        let report = await run.perform()
        progress.stop()
        if StopSignals.isStopping { while true { try? await Task.sleep(for: .seconds(3600)) } }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            Output.line(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            Output.line(report.blocksTable())
            Output.line(report.summary)
        }
        if !report.passed { throw ExitCode.failure }
    }
}

/// What `extsandbox test` found.
struct ConformanceReport: Codable, Sendable {
    struct Check: Codable, Sendable {
        enum Status: String, Codable, Sendable { case pass, fail, skip }
        var name: String
        var status: Status
        /// What was seen.
        var detail: String
        /// For a failure: what to change.
        var fix: String?
        var milliseconds: Int
    }

    struct Block: Codable, Sendable {
        var what: String
        var sandbox: String
    }

    var extensionIdentifier: String?
    var bundle: String?
    var policy: String?
    var policyOrigin: String?
    var passed: Bool { !checks.contains { $0.status == .fail } }
    var checks: [Check] = []
    var blocks: [Block] = []

    enum CodingKeys: String, CodingKey {
        case extensionIdentifier = "extension", bundle, policy, policyOrigin = "policy-origin", checks, blocks, passed
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(extensionIdentifier, forKey: .extensionIdentifier)
        try container.encodeIfPresent(bundle, forKey: .bundle)
        try container.encodeIfPresent(policy, forKey: .policy)
        try container.encodeIfPresent(policyOrigin, forKey: .policyOrigin)
        try container.encode(passed, forKey: .passed)
        try container.encode(checks, forKey: .checks)
        try container.encode(blocks, forKey: .blocks)
    }

    init() {}

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        extensionIdentifier = try container.decodeIfPresent(String.self, forKey: .extensionIdentifier)
        bundle = try container.decodeIfPresent(String.self, forKey: .bundle)
        policy = try container.decodeIfPresent(String.self, forKey: .policy)
        policyOrigin = try container.decodeIfPresent(String.self, forKey: .policyOrigin)
        checks = try container.decode([Check].self, forKey: .checks)
        blocks = try container.decode([Block].self, forKey: .blocks)
    }

    static func line(_ check: Check) -> String {
        let label = switch check.status { case .pass: "PASS"; case .fail: "FAIL"; case .skip: "SKIP" }
        var text = "  \(label)  \(check.name.padded(to: 28))\(check.detail)"
        if let fix = check.fix { text += "\n        fix: \(fix)" }
        return text
    }

    func blocksTable() -> String {
        guard !blocks.isEmpty else { return "" }
        let width = (blocks.map(\.what.count).max() ?? 0) + 2
        var lines = ["What the sandbox blocks (policy '\(policy ?? "?")'):"]
        for block in blocks { lines.append("  \(block.what.padded(to: width))\(block.sandbox)") }
        return lines.joined(separator: "\n")
    }

    var summary: String {
        let passedCount = checks.filter { $0.status == .pass }.count
        let failedCount = checks.filter { $0.status == .fail }.count
        let skipped = checks.filter { $0.status == .skip }.count
        let counts = "\(passedCount) of \(checks.count) checks passed" + (failedCount > 0 ? ", \(failedCount) failed" : "")
            + (skipped > 0 ? ", \(skipped) not run" : "")
        return "conformance of \(extensionIdentifier ?? "the extension"): \(passed ? "PASSED" : "FAILED") (\(counts))"
    }
}

extension String {
    func padded(to width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}

/// The checks of one `extsandbox test`, in order.
final class ConformanceRun: Sendable {
    let argument: String
    let policyOverride: String?
    let payload: String
    let timeout: Double
    let progress: Progress
    let printLive: Bool
    private let report = Mutex(ConformanceReport())
    private let conversation = Mutex<Conversation?>(nil)
    /// How the extension ended, when it ended by itself (an interruption).
    private let ended = Mutex<Termination?>(nil)

    init(argument: String, policy: String?, payload: String, timeout: Double, progress: Progress, printLive: Bool) {
        self.argument = argument
        self.policyOverride = policy
        self.payload = payload
        self.timeout = timeout
        self.progress = progress
        self.printLive = printLive
    }

    private static let protocolDoc = "docs/wire-protocol.md"

    /// Runs `body` as the check `name`, timed, with progress shown while it takes long.
    private func check(_ name: String, _ body: () async -> (ConformanceReport.Check.Status, String, String?)) async -> Bool {
        progress.begin(name)
        let clock = ContinuousClock()
        let start = clock.now
        let (status, detail, fix) = await body()
        let elapsed = clock.now - start
        progress.end()
        let milliseconds = Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
        let entry = ConformanceReport.Check(name: name, status: status, detail: detail, fix: fix, milliseconds: milliseconds)
        report.withLock { $0.checks.append(entry) }
        if printLive { Output.line(ConformanceReport.line(entry)) }
        return status == .pass
    }

    private func skip(_ names: [String], because reason: String) {
        for name in names {
            let entry = ConformanceReport.Check(name: name, status: .skip, detail: "not run: \(reason)", fix: nil, milliseconds: 0)
            report.withLock { $0.checks.append(entry) }
            if printLive { Output.line(ConformanceReport.line(entry)) }
        }
    }

    static let launchChecks = ["launch and READY", "handshake and version", "accepts a connection", "round trip",
                               "file descriptor passing", "cancellation", "suspend and resume", "exit after GOODBYE",
                               "no seccomp violation"]

    /// Every check; the report.
    func perform() async -> ConformanceReport {
        // 1. The manifest (and, for an identifier, whether its host would run it).
        var target: RunTarget?
        var refusal = ""
        _ = await check("manifest") {
            do {
                let resolved = try await RunTarget.resolve(argument, policy: policyOverride)
                target = resolved
                let identity = resolved.identity
                return (.pass, "\(identity.bundleIdentifier) \(identity.version) for point \(identity.point.name)", nil)
            } catch {
                refusal = "\(error)"
                return (.fail, refusal, Self.fix(forRefusal: refusal))
            }
        }
        guard let target else {
            skip(["policy"] + Self.launchChecks, because: "the manifest check failed")
            return report.withLock { $0 }
        }
        let identity = target.identity
        report.withLock {
            $0.extensionIdentifier = identity.bundleIdentifier
            $0.bundle = target.bundlePath
            $0.policy = identity.point.securityLevel
            $0.policyOrigin = target.policyOrigin
        }
        // 2. The policy loads (and gives the table of what it blocks).
        var loaded: Policy?
        _ = await check("policy") {
            do {
                let searchPath = PolicySearchPath.default(executablePath: PolicySearchPath.currentExecutable())
                let policy = try PolicyLoader.load(nameOrPath: identity.point.securityLevel, searchPath: searchPath)
                loaded = policy
                return (.pass, "'\(policy.name)' (\(target.policyOrigin))\(policy.sourcePath.map { ", \($0)" } ?? "")", nil)
            } catch {
                return (.fail, "\(error)", "install the policy, or pass --policy NAME of one that `extsandbox policy list` shows")
            }
        }
        if let loaded { report.withLock { $0.blocks = SandboxBlocks.table(for: loaded) } }
        guard loaded != nil else {
            target.close()
            skip(Self.launchChecks, because: "the policy did not load")
            return report.withLock { $0 }
        }
        await launchChecks(target)
        return report.withLock { $0 }
    }

    /// Checks 3 onwards, on a running extension.
    private func launchChecks(_ target: RunTarget) async {
        let identity = target.identity
        let limit = Duration.milliseconds(Int64(timeout * 1000))
        var session: RunSession?
        var remaining = Self.launchChecks
        func done(_ name: String) { remaining.removeAll { $0 == name } }
        func skipRest(_ reason: String, keeping kept: [String] = []) {
            skip(remaining.filter { !kept.contains($0) }, because: reason)
            remaining = remaining.filter { kept.contains($0) }
        }
        let clock = ContinuousClock()

        // 3. Launch: READY with the right identifier.
        var launchFailure: (any Error)?
        _ = await check("launch and READY") {
            let start = clock.now
            do {
                session = try await RunSession(target: target, suspendAfter: .milliseconds(200), readyTimeout: limit) { event in
                    if case .interrupted(let reason) = event { self.ended.withLock { $0 = reason } }
                }
                return (.pass, "READY as \(identity.bundleIdentifier) in \(Self.milliseconds(clock.now - start)) ms", nil)
            } catch {
                launchFailure = error
                return (.fail, "\(error)", Self.fix(forLaunchFailure: error, identifier: identity.bundleIdentifier))
            }
        }
        done("launch and READY")
        guard let session else {
            target.close()
            skipRest("the extension did not launch", keeping: ["no seccomp violation"])
            await seccompCheck(policy: identity.point.securityLevel, termination: Self.termination(of: launchFailure))
            return
        }
        let conversation = Conversation(session: session, timeout: timeout)
        self.conversation.withLock { $0 = conversation }

        // 4-5. Handshake, version, acceptance.
        var connected = false
        var handshakeError: (any Error)?
        _ = await check("handshake and version") {
            do {
                _ = try await conversation.connected()
                connected = true
                return (.pass, "HELLO answered with protocol version 1", nil)
            } catch ExtensionError.rejected(let message) {
                handshakeError = ExtensionError.rejected(message)
                return (.pass, "answered with a rejection (ERROR id 0, code 1)", nil)
            } catch {
                handshakeError = error
                return (.fail, "\(error)", Self.fix(forHandshake: error, timeout: timeout))
            }
        }
        done("handshake and version")
        if case ExtensionError.rejected(let message)? = handshakeError {
            _ = await check("accepts a connection") {
                (.fail, "the extension rejected the host's connection\(message.isEmpty ? "" : ": \(message)")",
                 "accept connections from the hosts of its point: the host names the connection \(identity.bundleIdentifier) in its HELLO (AppExtension.accept in the Swift SDK)")
            }
            done("accepts a connection")
        } else if connected {
            _ = await check("accepts a connection") { (.pass, "accepted", nil) }
            done("accepts a connection")
        }
        guard connected else {
            skipRest("no connection was made", keeping: ["exit after GOODBYE", "no seccomp violation"])
            await goodbyeCheck(conversation)
            await seccompCheck(policy: identity.point.securityLevel, termination: ended.withLock { $0 })
            return
        }

        // 6. A round trip.
        let roundTrip = await check("round trip") { await self.requestCheck(conversation, fileDescriptor: false) }
        done("round trip")
        if roundTrip {
            // 7. A request with a file descriptor.
            let fds = await check("file descriptor passing") { await self.requestCheck(conversation, fileDescriptor: true) }
            done("file descriptor passing")
            // 8. Cancellation.
            if fds {
                _ = await check("cancellation") { await self.cancellationCheck(conversation) }
            } else {
                skip(["cancellation"], because: "the request with a file descriptor failed")
            }
            done("cancellation")
            // 9. Suspend and resume.
            if ended.withLock({ $0 }) == nil {
                _ = await check("suspend and resume") { await self.suspendCheck(conversation, session: session) }
            } else {
                skip(["suspend and resume"], because: "the extension ended")
            }
            done("suspend and resume")
        } else {
            skipRest("the round trip failed", keeping: ["exit after GOODBYE", "no seccomp violation"])
        }
        // 10. GOODBYE.
        await goodbyeCheck(conversation)
        // 11. Seccomp.
        await seccompCheck(policy: identity.point.securityLevel, termination: ended.withLock { $0 })
    }

    /// A request (`payload`, with a memfd attached when `fileDescriptor`) gets an answer.
    private func requestCheck(_ conversation: Conversation, fileDescriptor: Bool) async -> (ConformanceReport.Check.Status, String, String?) {
        let connection: ExtensionConnection
        do {
            connection = try await conversation.connected()
        } catch {
            return (.fail, "no connection: \(error)", nil)
        }
        var fds: [Int32] = []
        if fileDescriptor {
            // The read end of a pipe with a few bytes in it (the write end is closed).
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { return (.fail, "pipe: \(String(cString: strerror(errno)))", nil) }
            _ = write(ends[1], "extsandbox-test", 15)
            close(ends[1])
            fds = [ends[0]]
        }
        defer { fds.forEach { close($0) } }
        let message = ExtensionMessage(Array(payload.utf8), fileDescriptors: fds)
        let outcome = await Self.send(message, on: connection, timeout: timeout)
        let what = fileDescriptor ? "a request with a file descriptor" : "a request"
        switch outcome {
        case .success(let reply):
            reply.fileDescriptors.forEach { close($0) }
            guard connection.isOpen else {
                return (.fail, "answered, then the connection closed", "keep the connection open after answering \(what) (\(Self.protocolDoc) §4)")
            }
            return (.pass, "reply: \(MessageText.render(reply.payload, fileDescriptors: reply.fileDescriptors.count))", nil)
        case .failure(ExtensionError.remote(let code, let message)):
            return (.pass, "answered error \(code)\(message.isEmpty ? "" : ": \(message)")", nil)
        case .failure(let error):
            return (.fail, "\(what): \(error)", Self.fix(forRequest: error, fileDescriptor: fileDescriptor, timeout: timeout))
        }
    }

    /// A request cancelled right after it was sent: the connection stays usable.
    private func cancellationCheck(_ conversation: Conversation) async -> (ConformanceReport.Check.Status, String, String?) {
        guard let connection = try? await conversation.connected() else { return (.fail, "no connection", nil) }
        let message = ExtensionMessage(Array(payload.utf8))
        let request = Task { try await connection.send(message) }
        try? await Task.sleep(for: .milliseconds(5))
        request.cancel()
        _ = await request.result
        // The CANCEL (or the late answer) must not break anything: the next request is answered.
        switch await Self.send(message, on: connection, timeout: timeout) {
        case .success, .failure(ExtensionError.remote):
            guard connection.isOpen else { return (.fail, "the connection closed after a CANCEL", Self.cancelFix) }
            return (.pass, "a request after a CANCEL was answered", nil)
        case .failure(let error):
            return (.fail, "after a CANCEL: \(error)", Self.cancelFix)
        }
    }

    private static let cancelFix = "answer a cancelled request (ERROR 3, or its reply if it was on the way) and ignore a CANCEL for a request already answered; never close the connection for it (\(protocolDoc) §3, Cancellation)"

    /// No connection: the host stops the whole sandbox; a new connection continues it and is served.
    private func suspendCheck(_ conversation: Conversation, session: RunSession) async -> (ConformanceReport.Check.Status, String, String?) {
        let mark = session.recordedEvents.count
        conversation.closeConnection()
        guard await session.waitForEvent(after: mark, timeout: .seconds(3), { $0 == .suspended }) else {
            if case .interrupted(let reason)? = session.recordedEvents.dropFirst(mark).last {
                return (.fail, "the extension ended when its connection closed: \(reason)", "keep running when a connection closes: the host decides when the extension ends (\(Self.protocolDoc) §11)")
            }
            return (.fail, "the host did not suspend the extension within 3 s", nil)
        }
        try? await Task.sleep(for: .milliseconds(300))
        switch await requestCheck(conversation, fileDescriptor: false) {
        case (.pass, _, _):
            let resumed = session.recordedEvents.dropFirst(mark).contains(.resumed)
            return (.pass, "stopped while idle, \(resumed ? "resumed, " : "")answered a new connection", nil)
        case (_, let detail, _):
            return (.fail, "after suspension and resumption: \(detail)", "expect to be stopped (SIGSTOP) at any moment while no connection is open, and to serve the next connection after SIGCONT; clocks jump meanwhile (\(Self.protocolDoc) §11)")
        }
    }

    /// The host ends the extension: GOODBYE on fd 3; it must exit 0 within the grace.
    private func goodbyeCheck(_ conversation: Conversation) async {
        if let reason = ended.withLock({ $0 }) {
            skip(["exit after GOODBYE"], because: "the extension ended before (\(reason))")
            return
        }
        _ = await check("exit after GOODBYE") {
            let (termination, elapsed) = await conversation.finish()
            let ms = Self.milliseconds(elapsed)
            switch termination {
            case .exited(code: 0):
                return (.pass, "exited 0, \(ms) ms after GOODBYE", nil)
            case .exited(let code):
                return (.fail, "exited with status \(code) after GOODBYE", "exit with status 0 after the host's GOODBYE (\(Self.protocolDoc) §7)")
            case .killed:
                return (.fail, "still running \(ms) ms after the host's GOODBYE: killed", "on GOODBYE on fd 3, send GOODBYE back and exit 0 at once; the host kills an extension that has not exited after half a second (\(Self.protocolDoc) §7, §11)")
            default:
                ended.withLock { $0 = termination }
                return (.fail, "after GOODBYE: \(termination)", "exit 0 after the host's GOODBYE (\(Self.protocolDoc) §7)")
            }
        }
    }

    private func seccompCheck(policy: String, termination: Termination?) async {
        _ = await check("no seccomp violation") {
            if case .seccompViolation(let syscall)? = termination {
                let name = syscall ?? "a system call that could not be named"
                return (.fail, "the sandbox was killed: \(name) is forbidden by policy '\(policy)'",
                        "do without \(name) (`extsandbox policy show \(policy)` lists what the policy allows), or ask the host for a point whose security level allows it")
            }
            return (.pass, "none", nil)
        }
    }

    /// SIGINT or SIGTERM: ends the extension, leaving nothing running.
    func abandon() async {
        progress.stop()
        if let conversation = conversation.withLock({ $0 }) { _ = await conversation.finish() }
    }

    // MARK: Helpers

    static func send(_ message: ExtensionMessage, on connection: ExtensionConnection, timeout: Double) async -> Result<ExtensionMessage, any Error> {
        await withTaskGroup(of: Result<ExtensionMessage, any Error>?.self) { group in
            group.addTask {
                do { return .success(try await connection.send(message)) } catch { return .failure(error) }
            }
            group.addTask {
                try? await Task.sleep(for: .milliseconds(Int64(timeout * 1000)))
                return Task.isCancelled ? nil : .failure(Conversation.NoReply(seconds: timeout))
            }
            var outcome: Result<ExtensionMessage, any Error> = .failure(Conversation.NoReply(seconds: timeout))
            for await result in group {
                guard let result else { continue }
                outcome = result
                break
            }
            group.cancelAll()
            return outcome
        }
    }

    static func milliseconds(_ duration: Duration) -> Int {
        Int(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    static func termination(of error: (any Error)?) -> Termination? {
        if case ExtensionError.endedBeforeReady(let termination)? = error { return termination }
        if case ExtensionError.interrupted(let termination)? = error { return termination }
        return nil
    }

    static func fix(forRefusal refusal: String) -> String? {
        if refusal.contains("extsandbox approve") || refusal.contains("extsandbox enable") || refusal.contains("--policy") { return nil }
        return "fix the manifest or bundle as the message says (docs/extensions.md, Extension bundles)"
    }

    static func fix(forLaunchFailure error: any Error, identifier: String) -> String? {
        switch error {
        case ExtensionError.endedBeforeReady(.seccompViolation(let syscall)):
            return "it was killed for calling \(syscall ?? "a forbidden system call") before READY; do without it, or ask for a point whose security level allows it"
        case ExtensionError.endedBeforeReady(let termination):
            return "stay running and send READY (kind 9, id 0) with the identifier \(identifier) on fd 3 once ready to accept connections; it \(termination) first (\(protocolDoc) §7)"
        case ExtensionError.notReadyInTime:
            return "send READY (kind 9, id 0) with the identifier \(identifier) on fd 3 as soon as it can accept connections (\(protocolDoc) §7)"
        case DiscoveryError.identifierMismatch:
            return "READY must carry exactly $EXTSANDBOX_EXTENSION_IDENTIFIER (\(identifier)), the manifest's identifier (\(protocolDoc) §7)"
        default:
            return nil
        }
    }

    static func fix(forHandshake error: any Error, timeout: Double) -> String? {
        let text = "\(error)"
        if text.contains("unsupported protocol version") {
            return "answer the host's HELLO with a HELLO of protocol version 1 (\(protocolDoc) §5)"
        }
        if text.contains("did not answer the handshake") {
            return "answer the host's HELLO on each new connection with a HELLO (version 1, its maximum frame size) or an ERROR id 0, within \(timeout == timeout.rounded() ? String(Int(timeout)) : String(timeout)) s (\(protocolDoc) §5)"
        }
        if case ExtensionError.interrupted(let termination) = error {
            return "the extension ended during the handshake (\(termination)): take the socket from CONNECT and answer its HELLO (\(protocolDoc) §5, §7)"
        }
        return "answer the host's HELLO as \(protocolDoc) §5 says"
    }

    static func fix(forRequest error: any Error, fileDescriptor: Bool, timeout: Double) -> String? {
        switch error {
        case is Conversation.NoReply:
            return "answer every REQUEST with exactly one REPLY or ERROR carrying its id (\(protocolDoc) §3)"
        case ExtensionError.interrupted(.seccompViolation(let syscall)):
            return "it was killed for calling \(syscall ?? "a forbidden system call") (see the seccomp check)"
        case ExtensionError.interrupted(let termination):
            return "it ended while handling the request (\(termination)): reproduce with `extsandbox run BUNDLE --send TEXT` and fix the crash"
        default:
            return fileDescriptor
                ? "read frames with recvmsg and take the SCM_RIGHTS file descriptors with the frame that declares them (\(protocolDoc) §4)"
                : "answer requests as \(protocolDoc) §3 says"
        }
    }
}

/// What a policy blocks, in rows for `extsandbox test`: the syscall groups it denies (killed or
/// refused with an errno), then the network, the file system, exec and limits.
enum SandboxBlocks {
    static func table(for policy: Policy) -> [ConformanceReport.Block] {
        var rows: [ConformanceReport.Block] = []
        let seccomp = policy.seccomp
        var byName: [String: [SyscallRule]] = [:]
        for rule in seccomp.rules { byName[rule.syscall, default: []].append(rule) }
        func action(of name: String) -> String {
            let rules = byName[name] ?? []
            if rules.isEmpty { return text(seccomp.defaultAction) }
            if rules.contains(where: { !$0.conditions.isEmpty }) { return "conditional" }
            return text(rules[0].action)
        }
        for group in SyscallGroups.all where group.name != "@default" && group.name != "@known" {
            let names = (SyscallGroups.syscalls(in: group.name) ?? []).filter { Syscalls.number(of: $0) != nil }
            guard !names.isEmpty else { continue }
            var counts: [String: Int] = [:]
            for name in names { counts[action(of: name), default: 0] += 1 }
            let denied = counts.filter { $0.key != "allowed" && $0.key != "logged" && $0.key != "conditional" }
            guard !denied.isEmpty else { continue }
            let summary = counts.sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }
                .map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            let all = denied.count == 1 && denied.first!.value == names.count
            rows.append(.init(what: group.name, sandbox: all ? "\(denied.first!.key) (all \(names.count))" : summary))
        }
        rows.append(.init(what: "exec after start", sandbox: seccomp.allowExecAfterStart ? "allowed" : "killed (execve/execveat after the launch)"))
        switch policy.network {
        case .none: rows.append(.init(what: "network", sandbox: "no network: loopback only, in its own network namespace"))
        }
        var readOnly: [String] = [], writable: [String] = []
        for mount in policy.filesystem.mounts {
            switch mount {
            case .bind(_, let destination, let isWritable, _): (isWritable ? { writable.append(destination) } : { readOnly.append(destination) })()
            case .tmpfs(let destination, let size): writable.append("\(destination) (tmpfs, \(size >> 20) MiB)")
            }
        }
        rows.append(.init(what: "filesystem", sandbox: "only: read-only \(readOnly.isEmpty ? "nothing" : readOnly.joined(separator: " ")); writable \(writable.isEmpty ? "nothing" : writable.joined(separator: " ")); a fresh /proc, a minimal /dev"))
        var limits: [String] = []
        if let memory = policy.limits.memoryBytes { limits.append("memory \(memory >> 20) MiB") }
        if let processes = policy.limits.processes { limits.append("\(processes) processes") }
        if let files = policy.limits.openFiles { limits.append("\(files) open files") }
        if let cpu = policy.limits.cpuSeconds { limits.append("\(cpu) s CPU") }
        if let wall = policy.limits.wallClockSeconds { limits.append("\(wall) s wall clock") }
        if !limits.isEmpty { rows.append(.init(what: "limits", sandbox: limits.joined(separator: ", "))) }
        return rows
    }

    private static func text(_ action: SyscallAction) -> String {
        switch action {
        case .allow: return "allowed"
        case .log: return "logged"
        case .killProcess: return "killed"
        case .errno(let code):
            let names: [Int32: String] = [EPERM: "EPERM", EACCES: "EACCES", ENOSYS: "ENOSYS", EINVAL: "EINVAL", ENOENT: "ENOENT"]
            return "errno \(names[code] ?? String(code))"
        }
    }
}

/// A progress line on a terminal while a check takes over a second (never when standard output
/// is not a terminal, nor with --json).
final class Progress: Sendable {
    private struct State {
        var name: String?
        var started = ContinuousClock.now
        var drawn = false
        var ticker: Task<Void, Never>?
    }

    private let enabled: Bool
    private let state = Mutex(State())

    init(enabled: Bool) {
        self.enabled = enabled
        guard enabled else { return }
        let ticker = Task { [weak self] in
            let frames = ["|", "/", "-", "\\"]
            var frame = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                frame += 1
                self?.draw(frames[frame % frames.count])
            }
        }
        state.withLock { $0.ticker = ticker }
    }

    private func draw(_ glyph: String) {
        state.withLock { state in
            guard let name = state.name else { return }
            let elapsed = ContinuousClock.now - state.started
            guard elapsed >= .seconds(1) else { return }
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let tenths = Int(seconds * 10)
            Output.writeAll(1, Array("\r\u{1B}[2K  \(glyph) \(name) (\(tenths / 10).\(tenths % 10) s)".utf8))
            state.drawn = true
        }
    }

    func begin(_ name: String) {
        guard enabled else { return }
        state.withLock {
            $0.name = name
            $0.started = .now
        }
    }

    /// Clears the line before the check's result is printed.
    func end() {
        guard enabled else { return }
        state.withLock { state in
            state.name = nil
            if state.drawn { Output.writeAll(1, Array("\r\u{1B}[2K".utf8)) }
            state.drawn = false
        }
    }

    func stop() {
        end()
        state.withLock { $0.ticker?.cancel() }
    }
}
