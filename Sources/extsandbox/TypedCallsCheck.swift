import ExtSandbox
import SandboxRuntime
import SandboxSystem

/// What `extsandbox test` found about typed calls: whether the extension speaks the call envelope
/// (docs/wire-protocol.md §12), through the system target every implementation serves (§12.4),
/// since the CLI knows no extension's contract.
struct TypedCallsReport: Codable, Sendable {
    enum Outcome: String, Codable, Sendable {
        /// It answered the ping and the unknown method as §12.4 says.
        case typed
        /// Its answer to the ping was not in the envelope's language: a byte-level extension.
        case notTyped = "not-typed"
        /// It speaks the envelope (or hung or ended on it) but answered wrongly.
        case failed
        /// No connection to probe on.
        case notRun = "not-run"
    }

    struct Probe: Codable, Sendable {
        var name: String
        var status: ConformanceReport.Check.Status
        /// `reply`, `error`, or `none` (no answer).
        var answer: String
        /// The ERROR's code, for an `error` answer.
        var code: UInt32?
        /// Why it did not pass, as a token (`wrong-value`, `envelope-error`, `no-answer`, `ended`…).
        var reason: String?
        var detail: String
        var fix: String?
        var milliseconds: Int
    }

    var result = Outcome.notRun
    var probes: [Probe] = []

    var passedCount: Int { probes.filter { $0.status == .pass }.count }
    var failedCount: Int { probes.filter { $0.status == .fail }.count }

    enum CodingKeys: String, CodingKey { case result, passed, failed, probes }

    init() {}

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        result = try container.decode(Outcome.self, forKey: .result)
        probes = try container.decode([Probe].self, forKey: .probes)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(result, forKey: .result)
        try container.encode(passedCount, forKey: .passed)
        try container.encode(failedCount, forKey: .failed)
        try container.encode(probes, forKey: .probes)
    }

    static let section = "docs/wire-protocol.md §12.4"

    /// The block for people, escaped (it quotes what the extension answered).
    func block() -> String {
        let heading = "Typed calls (\(Self.section)): "
        switch result {
        case .notRun:
            return heading + "not checked (\(probes.first?.detail ?? "no connection"))"
        case .notTyped:
            return heading + "not a typed extension: \(TerminalText.escaped(probes.first?.detail ?? ""))"
        case .typed, .failed:
            let verdict = result == .typed ? "a typed extension" : "FAILED"
            return ([heading + verdict] + probes.map { probe in
                ConformanceReport.line(ConformanceReport.Check(name: probe.name, status: probe.status, detail: probe.detail,
                                                               fix: probe.fix, milliseconds: probe.milliseconds))
            }).joined(separator: "\n")
        }
    }

    /// For the summary line.
    var summary: String {
        switch result {
        case .notRun: "typed calls not checked"
        case .notTyped: "not a typed extension"
        case .typed, .failed: "typed calls: \(passedCount) of \(probes.count) passed" + (failedCount > 0 ? ", \(failedCount) failed" : "")
        }
    }
}

extension TypedCallsReport {
    /// The method identifier of the unknown-method probe: not `$s…TE`, so no Swift method has it.
    static let missingMethod = "extsandbox-test.no-such-method"

    /// Probes the extension on `connection`: a ping of `text` on the system target, then (if it
    /// passed) a method that cannot exist on the extension's exported object. Also how the
    /// extension ended, if it ended during a probe.
    static func probe(_ connection: ExtensionConnection, text: String, timeout: Double) async -> (TypedCallsReport, ended: Termination?) {
        var report = TypedCallsReport()
        let argument: [UInt8]
        let ping: [UInt8]
        do {
            argument = try ValueCoding.encode(text)
            ping = try SystemTarget.pingEnvelope(argument)
        } catch {
            report.probes = [Probe(name: "ping", status: .skip, answer: "none", detail: "--request does not fit a call: \(error)",
                                   milliseconds: 0)]
            return (report, nil)
        }
        let (pinged, pingKind, pingEnded) = await timed("ping", ExtensionMessage(ping), on: connection, timeout: timeout) { answer in
            pingVerdict(answer, expected: argument, timeout: timeout)
        }
        report.probes.append(pinged)
        switch pingKind {
        case .notTyped:
            report.result = .notTyped
            return (report, pingEnded)
        case .failed:
            report.result = .failed
            report.probes.append(Probe(name: "unknown method", status: .skip, answer: "none", detail: "not run: the ping failed",
                                       milliseconds: 0))
            return (report, pingEnded)
        case .typed, .notRun:
            break
        }
        let unknown: [UInt8]
        do {
            unknown = try CallEnvelope(target: ExtensionActorID.extension.name, method: missingMethod, arguments: []).encoded()
        } catch {
            preconditionFailure("a constant envelope is valid: \(error)")
        }
        let (missing, _, missingEnded) = await timed("unknown method", ExtensionMessage(unknown), on: connection, timeout: timeout) { answer in
            unknownMethodVerdict(answer, timeout: timeout)
        }
        report.probes.append(missing)
        report.result = missing.status == .pass ? .typed : .failed
        return (report, missingEnded)
    }

    /// What one answer makes of a probe: the probe (without its time) and what it says of the extension.
    typealias Verdict = (probe: Probe, kind: Outcome)

    private static func timed(_ name: String, _ message: ExtensionMessage, on connection: ExtensionConnection, timeout: Double,
                              _ verdict: (Result<ExtensionMessage, any Error>) -> Verdict) async -> (Probe, Outcome, Termination?) {
        let clock = ContinuousClock()
        let start = clock.now
        let outcome = await ConformanceRun.send(message, on: connection, timeout: timeout)
        let elapsed = ConformanceRun.milliseconds(clock.now - start)
        if case .success(let reply) = outcome { reply.closeFileDescriptors() }
        var (probe, kind) = verdict(outcome)
        probe.name = name
        probe.milliseconds = elapsed
        var ended: Termination?
        if case .failure(ExtensionError.interrupted(let termination)) = outcome { ended = termination }
        return (probe, kind, ended)
    }

    private static let envelopeErrors: ClosedRange<UInt32> = CallErrorCode.malformedEnvelope...CallErrorCode.thrownError

    /// The ping: its own argument back means typed; an answer that is no value, or an ERROR
    /// outside the envelope's codes, means it does not speak the envelope (not a failure);
    /// anything else from an extension that does (another value, an envelope ERROR), no answer,
    /// or its end fails.
    static func pingVerdict(_ answer: Result<ExtensionMessage, any Error>, expected: [UInt8], timeout: Double) -> Verdict {
        let fix = "serve the system target on every connection: answer the call envelope of target \"system\", method \"ping\" with a REPLY of its argument's bytes unchanged (\(section); the Swift SDK does this)"
        switch answer {
        case .success(let reply) where reply.payload == expected:
            return (Probe(name: "", status: .pass, answer: "reply", detail: "the system target echoed its argument", milliseconds: 0), .typed)
        case .success(let reply):
            let shown = MessageText.render(reply.payload, fileDescriptors: reply.fileDescriptors.count)
            do {
                try ValueCoding.validate(reply.payload)
            } catch {
                return (Probe(name: "", status: .skip, answer: "reply", reason: "not-a-value",
                              detail: "it answered the ping with bytes that are not a call result (\(shown))", milliseconds: 0), .notTyped)
            }
            return (Probe(name: "", status: .fail, answer: "reply", reason: "wrong-value",
                          detail: "the ping's reply is a value, but not its argument: \(shown)", fix: fix, milliseconds: 0), .failed)
        case .failure(ExtensionError.remote(let code, let message)) where envelopeErrors.contains(code):
            return (Probe(name: "", status: .fail, answer: "error", code: code, reason: "envelope-error",
                          detail: "it speaks the call envelope but refused the ping: error \(code)\(message.isEmpty ? "" : ": \(message)")",
                          fix: fix, milliseconds: 0), .failed)
        case .failure(ExtensionError.remote(let code, let message)):
            return (Probe(name: "", status: .skip, answer: "error", code: code, reason: "other-error",
                          detail: "it answered the ping with error \(code)\(message.isEmpty ? "" : ": \(message)"), not a call answer",
                          milliseconds: 0), .notTyped)
        case .failure(let error):
            return (failure(error, during: "the ping", timeout: timeout), .failed)
        }
    }

    /// The unknown method: ERROR 22 passes; anything else fails.
    static func unknownMethodVerdict(_ answer: Result<ExtensionMessage, any Error>, timeout: Double) -> Verdict {
        let fix = "answer a call of a method the exported object does not have with ERROR 22 (\(section), §12.3)"
        switch answer {
        case .failure(ExtensionError.remote(CallErrorCode.unknownMethod, let message)):
            return (Probe(name: "", status: .pass, answer: "error", code: CallErrorCode.unknownMethod,
                          detail: "error 22\(message.isEmpty ? "" : ": \(message)")", milliseconds: 0), .typed)
        case .failure(ExtensionError.remote(CallErrorCode.unknownTarget, let message)):
            return (Probe(name: "", status: .fail, answer: "error", code: CallErrorCode.unknownTarget, reason: "no-exported-object",
                          detail: "it exports no object named extension: error 21\(message.isEmpty ? "" : ": \(message)")",
                          fix: "export the object of its contract on every connection (the Swift SDK: AppExtension.exportedObject) (\(section))",
                          milliseconds: 0), .failed)
        case .failure(ExtensionError.remote(let code, let message)):
            return (Probe(name: "", status: .fail, answer: "error", code: code, reason: "wrong-error",
                          detail: "error \(code) instead of 22 (unknown method)\(message.isEmpty ? "" : ": \(message)")", fix: fix,
                          milliseconds: 0), .failed)
        case .success(let reply):
            return (Probe(name: "", status: .fail, answer: "reply", reason: "replied",
                          detail: "a method that cannot exist was answered with a reply: \(MessageText.render(reply.payload, fileDescriptors: reply.fileDescriptors.count))",
                          fix: fix, milliseconds: 0), .failed)
        case .failure(let error):
            return (failure(error, during: "a call of a method that cannot exist", timeout: timeout), .failed)
        }
    }

    /// No answer, the extension's end, or the connection's failure.
    private static func failure(_ error: any Error, during what: String, timeout: Double) -> Probe {
        switch error {
        case is Conversation.NoReply:
            return Probe(name: "", status: .fail, answer: "none", reason: "no-answer", detail: "\(what): \(error)",
                         fix: "answer every call envelope with a REPLY or an ERROR, as any REQUEST (\(section), §3)", milliseconds: 0)
        case ExtensionError.interrupted(let termination):
            return Probe(name: "", status: .fail, answer: "none", reason: "ended", detail: "it ended during \(what): \(termination)",
                         fix: "read call envelopes as untrusted bytes: answer a malformed or unknown call with an ERROR, never crash (\(section))",
                         milliseconds: 0)
        default:
            return Probe(name: "", status: .fail, answer: "none", reason: "connection", detail: "\(what): \(error)",
                         fix: "keep the connection open and answer every call (\(section))", milliseconds: 0)
        }
    }
}
