import ExtSandbox
import Glibc
import SandboxPolicy
import SandboxRuntime
import Synchronization

/// The checks of one `extsandbox test`, in order.
final class ConformanceRun: Sendable {
    let argument: String
    let policyOverride: String?
    let payload: String
    let timeout: Double
    let progress: ConformanceProgress
    let printLive: Bool
    private let report = Mutex(ConformanceReport())
    private let conversation = Mutex<Conversation?>(nil)
    /// How the extension ended, when it ended by itself (an interruption).
    private let ended = Mutex<Termination?>(nil)

    init(argument: String, policy: String?, payload: String, timeout: Double, progress: ConformanceProgress, printLive: Bool) {
        self.argument = argument
        self.policyOverride = policy
        self.payload = payload
        self.timeout = timeout
        self.progress = progress
        self.printLive = printLive
    }

    static let protocolDoc = "docs/wire-protocol.md"

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
            // Typed calls, a block of their own: last, so that an extension that ends on a call
            // envelope loses no other check.
            if ended.withLock({ $0 }) == nil { await typedCallsCheck(conversation) }
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
        var fds: [FileDescriptor] = []
        if fileDescriptor {
            // The read end of a pipe with a few bytes in it (the write end is closed).
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { return (.fail, "pipe: \(String(cString: strerror(errno)))", nil) }
            _ = write(ends[1], "extsandbox-test", 15)
            close(ends[1])
            fds = FileDescriptor(adopting: ends[0]).map { [$0] } ?? []
        }
        let message = ExtensionMessage(Array(payload.utf8), fileDescriptors: fds)
        let outcome = await Self.send(message, on: connection, timeout: timeout)
        let what = fileDescriptor ? "a request with a file descriptor" : "a request"
        switch outcome {
        case .success(let reply):
            reply.closeFileDescriptors()
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

    /// Whether the extension speaks the call envelope (docs/wire-protocol.md §12.4).
    private func typedCallsCheck(_ conversation: Conversation) async {
        guard let connection = try? await conversation.connected() else { return }
        progress.begin("typed calls")
        let (typed, termination) = await TypedCallsReport.probe(connection, text: payload, timeout: timeout)
        progress.end()
        report.withLock { $0.typedCalls = typed }
        // Known here before the session's event may have come: GOODBYE is then not checked.
        if let termination { ended.withLock { $0 = $0 ?? termination } }
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
}
