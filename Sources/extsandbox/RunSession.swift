import Dispatch
import ExtSandbox
import Glibc
import SandboxRuntime
import SandboxSystem
import Synchronization

/// One extension launched for `run` or `test` through the host API (`AppExtensionProcess`),
/// with its lifecycle events handed to `onEvent` as they happen, and a clean end: ``end()``
/// invalidates the handle (GOODBYE on the control socket, SIGKILL after the host's grace) and
/// waits until every process of the sandbox is gone.
final class RunSession: Sendable {
    let target: RunTarget
    let process: AppExtensionProcess
    /// Every event so far, in order (the test reads them).
    private let events = Mutex<[AppExtensionLifecycleEvent]>([])

    /// Launches `target` (returns once it said READY) with the host's default timers, unless given.
    init(target: RunTarget, suspendAfter: Duration = .milliseconds(250), terminateAfter: Duration = .seconds(30),
         readyTimeout: Duration = .seconds(10), onEvent: @escaping @Sendable (AppExtensionLifecycleEvent) -> Void) async throws {
        self.target = target
        let recorder = EventRecorder()
        process = try await AppExtensionProcess(configuration: .init(
            identity: target.identity,
            onEvent: { event in
                recorder.session?.record(event)
                onEvent(event)
            },
            suspendAfter: suspendAfter, terminateAfter: terminateAfter, readyTimeout: readyTimeout))
        // The launch event came before `self` was reachable: record it from the sandbox.
        events.withLock { $0.append(.launched(pid: process.sandbox.pid)) }
        recorder.session = self
    }

    private func record(_ event: AppExtensionLifecycleEvent) {
        events.withLock { $0.append(event) }
    }

    var recordedEvents: [AppExtensionLifecycleEvent] { events.withLock { $0 } }

    /// Waits until an event matching `matches` has been recorded (counting those already
    /// recorded after index `from`), or `timeout` passes: whether it came.
    func waitForEvent(after from: Int, timeout: Duration, _ matches: @escaping @Sendable (AppExtensionLifecycleEvent) -> Bool) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while clock.now < deadline {
            if events.withLock({ $0.dropFirst(from).contains(where: matches) }) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return events.withLock { $0.dropFirst(from).contains(where: matches) }
    }

    /// Invalidates the handle and waits for the sandbox to end (the host sends GOODBYE and kills
    /// it after its grace; after `limit` it is killed here): how it ended and how long that took.
    @discardableResult
    func end(limit: Duration = .seconds(3)) async -> (Termination, Duration) {
        let sandbox = process.sandbox
        let clock = ContinuousClock()
        let start = clock.now
        process.invalidate()
        let killer = Task {
            try? await Task.sleep(for: limit)
            if !Task.isCancelled { sandbox.kill() }
        }
        let termination = await sandbox.waitForExit()
        killer.cancel()
        return (termination, clock.now - start)
    }
}

/// Hands events to the session once it exists (they may come while it is being made).
private final class EventRecorder: Sendable {
    private let box = Mutex<RunSession?>(nil)
    var session: RunSession? {
        get { box.withLock { $0 } }
        set { box.withLock { $0 = newValue } }
    }
}

/// How `run` and `test` show messages: text when it is printable UTF-8 (tabs allowed, nothing
/// a terminal would act on: ``TerminalText``), else a hex summary.
enum MessageText {
    static func render(_ bytes: [UInt8], fileDescriptors: Int = 0) -> String {
        var text: String
        if let string = String(validating: bytes, as: UTF8.self),
           !string.unicodeScalars.contains(where: { $0 != "\t" && TerminalText.needsEscaping($0) }) {
            text = string
        } else {
            let hex = bytes.prefix(32).map { byte in
                let digits = String(byte, radix: 16)
                return digits.count == 1 ? "0" + digits : digits
            }.joined(separator: " ")
            text = "<\(bytes.count) bytes: \(hex)\(bytes.count > 32 ? " …" : "")>"
        }
        if fileDescriptors > 0 { text += " (+\(fileDescriptors) file descriptor\(fileDescriptors == 1 ? "" : "s"))" }
        return text
    }

    /// The event as one line.
    static func describe(_ event: AppExtensionLifecycleEvent) -> String {
        switch event {
        case .launched(let pid): return "launched (sandbox init pid \(pid))"
        case .reused: return "reused a running process"
        case .suspended: return "suspended (no connection open)"
        case .resumed: return "resumed"
        case .terminated: return "terminated"
        case .interrupted(let reason): return "interrupted: \(reason)"
        }
    }
}

/// Writes lines to standard output, unbuffered (it may be a pipe read as the session goes), from
/// any thread. (Not stdio: `fflush(NULL)` would wait for the lock of stdin, held by a reader
/// blocked in `getline`.)
enum Output {
    private static let lock = Mutex<Void>(())

    /// A line for people: control characters shown escaped (its line feeds kept).
    static func line(_ text: String) {
        unescapedLine(TerminalText.escaped(text, keepingLineFeeds: true))
    }

    /// A line for programs (JSON), written as it is.
    static func unescapedLine(_ text: String) {
        lock.withLock { _ in _ = writeAll(1, Array((text + "\n").utf8)) }
    }
}
