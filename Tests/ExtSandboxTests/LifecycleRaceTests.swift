import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime
import Synchronization
import Testing

/// The races of issue 14 ("races between idle timers and new work"), each run thousands of times
/// with idle timers of a few milliseconds, so that timers fire while connections and handles come
/// and go. Every lifecycle transition is decided under one lock and performed in that order, so
/// none of them may fail a request or a connection, hang, or report an interruption (no process
/// dies unexpectedly here: every end is an idle or no-handle end the host asked for).
///
/// A round that fails is counted, not thrown, so that a broken build reports how often each race
/// is lost (as the harness that found them did) instead of stopping at the first loss.
@Suite("Host API lifecycle races", .serialized)
struct LifecycleRaceTests {
    /// Random microseconds in `range`, slept on the caller's thread (Task.sleep is too coarse).
    static func jitter(_ range: ClosedRange<UInt32>) {
        let delay = UInt32.random(in: range)
        if delay > 0 { usleep(delay) }
    }

    /// Rounds run and the ones lost, with the first few reasons.
    struct Tally: CustomStringConvertible {
        var rounds = 0
        var failures: [String] = []
        /// The slowest round: a stopped handshake shows up here (and fails after `readyTimeout`).
        var slowest: Duration = .zero

        mutating func run(_ round: () async throws -> Void) async {
            rounds += 1
            let started = ContinuousClock.now
            do { try await round() } catch { failures.append("round \(rounds): \(error)") }
            slowest = max(slowest, ContinuousClock.now - started)
        }

        var description: String {
            "\(failures.count) of \(rounds) rounds failed, slowest \(slowest): \(failures.prefix(5))"
        }
    }

    enum Mismatch: Error { case reply(String), hung }

    /// A request echoed, within 2 s: a sandbox stopped under a running connection never answers,
    /// and that must fail the round rather than hang the suite (the request is cancelled).
    static func echo(_ connection: ExtensionConnection, _ text: String) async throws {
        let request = Task { try await connection.send(HostFixtures.message(text)) }
        let watchdog = Task {
            try await Task.sleep(for: .seconds(2))
            request.cancel()
        }
        defer { watchdog.cancel() }
        let reply: String
        do {
            reply = HostFixtures.text(try await request.value)
        } catch {
            if request.isCancelled { throw Mismatch.hung }
            throw error
        }
        guard reply == text else { throw Mismatch.reply(reply) }
    }

    static func count(_ events: [AppExtensionLifecycleEvent], _ wanted: (AppExtensionLifecycleEvent) -> Bool) -> Int {
        events.filter(wanted).count
    }

    @Test("a new handle made while the last handle and connection of the process go away gets a working process")
    func newHandleWhileTheLastConnectionCloses() async throws {
        let identity = HostFixtures.identity()
        /// Each handle has its own recorder: while it is attached (until its invalidate), its
        /// process must not end at all (its idle timers are far off, and it holds the process).
        func configuration(_ recorder: Recorder) -> AppExtensionProcess.Configuration {
            .init(identity: identity, onInterruption: recorder.onInterruption, onEvent: recorder.onEvent,
                  suspendAfter: .seconds(30), terminateAfter: .seconds(60), readyTimeout: .seconds(5))
        }
        var recorders = [Recorder()]
        var previous = try await AppExtensionProcess(configuration: configuration(recorders[0]))
        var connection: ExtensionConnection? = try await previous.makeConnection()
        var tally = Tally()
        var endedWhileAttached: [String] = []
        // Each round where the end wins launches a fresh process (about half of them): a launch
        // bounds the rounds, about a thousand on an idle machine.
        let deadline = ContinuousClock.now + .seconds(9)
        while tally.rounds < 1500 && ContinuousClock.now < deadline {
            let ending = previous, closing = connection
            let round = tally.rounds, connectionFirst = round % 2 == 0
            // Still attached: had it been given a process that was ending, it would have heard.
            if let last = recorders.last, last.recordedEvents.contains(where: { $0 == .terminated }) {
                endedWhileAttached.append("round \(round): \(last.recordedEvents)")
            }
            let recorder = Recorder()
            recorders.append(recorder)
            var next: AppExtensionProcess?
            await tally.run {
                // The last connection closes and the last handle goes (the process ends at once,
                // the connection's close or the handle's detach deciding it) while a new handle
                // for the same extension attaches and connects. (Making a handle takes a few
                // milliseconds: the end comes about as often before the attach as after.)
                // On a thread of its own, not a task: with the suite's other tests filling the
                // cooperative pool, a task would only run after the new handle is made.
                let gone = Task {
                    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                        DispatchQueue.global().async {
                            Self.jitter(0...4000)
                            if connectionFirst { closing?.invalidate(); ending.invalidate() } else { ending.invalidate(); closing?.invalidate() }
                            done.resume()
                        }
                    }
                }
                let made = try await AppExtensionProcess(configuration: configuration(recorder))
                next = made
                await gone.value
                let fresh = try await made.makeConnection()
                connection = fresh
                try await Self.echo(fresh, "round \(round)")
            }
            if let next { previous = next } else { connection = nil }
        }
        previous.invalidate()
        let events = recorders.flatMap(\.recordedEvents)
        let interruptions = recorders.flatMap(\.recordedInterruptions)
        let launches = Self.count(events) { if case .launched = $0 { true } else { false } }
        let reuses = Self.count(events) { $0 == .reused }
        #expect(tally.failures.isEmpty, "\(tally)")
        #expect(endedWhileAttached.isEmpty, "a new handle got a process that was ending: \(endedWhileAttached.prefix(5))")
        #expect(interruptions.isEmpty, "\(interruptions)")
        // Both outcomes of the race happened: the new handle attached before the end was decided
        // (reused), or after (a fresh launch). (How many rounds fit the time depends on the
        // machine's load: a few hundred to a thousand and more; the count is printed.)
        // On a quiet machine one outcome may win every round: say so rather than fail.
        if !(launches > 1 && reuses > 0) { print("note: only one outcome of the race was seen: \(launches) launches, \(reuses) reuses") }
        print("new handle vs the last close: \(tally); \(launches) launches, \(reuses) reuses, \(endedWhileAttached.count) ended while attached")
    }

    @Test("suspend vs connect: a connect right as the idle timer suspends is never stopped mid-handshake")
    func suspendVersusConnect() async throws {
        let recorder = Recorder()
        let process = try await AppExtensionProcess(configuration: .init(
            identity: HostFixtures.identity(), onInterruption: recorder.onInterruption, onEvent: recorder.onEvent,
            suspendAfter: .milliseconds(1), terminateAfter: .seconds(60), readyTimeout: .seconds(2)))
        defer { process.invalidate() }
        var tally = Tally()
        let deadline = ContinuousClock.now + .seconds(7)
        while tally.rounds < 4000 && ContinuousClock.now < deadline {
            let round = tally.rounds
            await tally.run {
                let connection = try await process.makeConnection()
                defer { connection.invalidate() }
                try await Self.echo(connection, "r\(round)")
            }
            // Around the suspend timer: before it, as it fires, after it (then resumed). Now and
            // then wait for the suspension itself: on a loaded machine the timer fires late, after
            // every jittered connect.
            if round % 16 == 15 {
                let before = Self.count(recorder.recordedEvents) { $0 == .suspended }
                _ = await HostFixtures.eventually(within: 1) { Self.count(recorder.recordedEvents) { $0 == .suspended } > before }
            } else {
                Self.jitter(0...2000)
            }
        }
        let suspensions = Self.count(recorder.recordedEvents) { $0 == .suspended }
        let resumptions = Self.count(recorder.recordedEvents) { $0 == .resumed }
        #expect(tally.failures.isEmpty, "\(tally)")
        #expect(tally.slowest < .seconds(3), "a connect hung: \(tally)")
        #expect(recorder.recordedInterruptions.isEmpty, "\(recorder.recordedInterruptions)")
        #expect(suspensions > 0, "the race was exercised: \(suspensions) suspensions in \(tally.rounds) rounds")
        // The sandbox is left running or suspended, never stopped while its state says running.
        #expect(process.sandbox.isRunning)
        print("suspend vs connect: \(tally); \(suspensions) suspensions, \(resumptions) resumptions")
    }

    @Test("terminate timer vs connect: a connect right as the idle process ends gets a working connection")
    func terminateVersusConnect() async throws {
        let recorder = Recorder()
        let process = try await AppExtensionProcess(configuration: .init(
            identity: HostFixtures.identity(), onInterruption: recorder.onInterruption, onEvent: recorder.onEvent,
            suspendAfter: .milliseconds(1), terminateAfter: .milliseconds(2), readyTimeout: .seconds(5)))
        defer { process.invalidate() }
        var tally = Tally()
        let deadline = ContinuousClock.now + .seconds(8)
        while tally.rounds < 3000 && ContinuousClock.now < deadline {
            let round = tally.rounds
            await tally.run {
                let connection = try await process.makeConnection()
                defer { connection.invalidate() }
                try await Self.echo(connection, "t\(round)")
            }
            // Mostly just before the terminate timer (a connect claiming the process as it
            // fires); now and then past it (the process has ended: a fresh launch).
            // Now and then wait for the idle end itself (timers fire late on a loaded machine).
            if round % 16 == 15 {
                let before = Self.count(recorder.recordedEvents) { $0 == .terminated }
                _ = await HostFixtures.eventually(within: 1) { Self.count(recorder.recordedEvents) { $0 == .terminated } > before }
            } else {
                Self.jitter(round % 4 == 0 ? 1000...4000 : 0...2200)
            }
        }
        let events = recorder.recordedEvents
        let ends = Self.count(events) { $0 == .terminated }
        let launches = Self.count(events) { if case .launched = $0 { true } else { false } }
        #expect(tally.failures.isEmpty, "\(tally)")
        #expect(recorder.recordedInterruptions.isEmpty, "\(recorder.recordedInterruptions)")
        #expect(ends > 0 && launches > 0,
                "the race was exercised: \(ends) idle ends, \(launches) launches in \(tally.rounds) rounds")
        print("terminate vs connect: \(tally); \(ends) idle ends, \(launches) launches")
    }
}
