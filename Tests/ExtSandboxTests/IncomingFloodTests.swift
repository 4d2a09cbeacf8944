import ExtSandbox
import Foundation
import Glibc
import Synchronization
import Testing
import TestSupport

/// The extension's requests and one-way messages cannot make the host hold without end (the
/// handlers' tasks, the messages, the answers it cannot write): at
/// ``ExtensionConnection/Handlers/maximumOutstandingMessages`` the host stops reading the
/// connection, and the extension's writes block, until one is done. Nothing is dropped.
@Suite("A flood of the extension's requests and one-way messages")
struct IncomingFloodTests {
    /// The handlers' view of the flood.
    final class Counts: Sendable {
        let running = Atomic<Int>(0)
        let mostRunning = Atomic<Int>(0)
        let handled = Atomic<Int>(0)
    }

    @Test("requests for 3 s, no answer read: at most the limit handled at once, memory flat, every request answered", .oneExitTestAtATime)
    func requestFlood() async {
        // In a process of its own (an exit test): its resident memory is the host's alone.
        let log = ExitTestLog()
        let result = await #expect(processExitsWith: .success) { [log = log as ExitTestLog] in
            func fail(_ why: String) -> Never {
                log.write(why)
                exit(1)
            }
            func residentKiB() -> Int {
                let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
                let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
                return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
            }
            let limit = 8
            let counts = Counts()
            let handlers = ExtensionConnection.Handlers(onRequest: { message in
                let running = counts.running.add(1, ordering: .relaxed).newValue
                counts.mostRunning.max(running, ordering: .relaxed)
                defer { counts.running.subtract(1, ordering: .relaxed) }
                try? await Task.sleep(for: .milliseconds(1))
                counts.handled.add(1, ordering: .relaxed)
                return ExtensionMessage([UInt8](repeating: 7, count: 64))
            }, maximumOutstandingMessages: limit)
            do {
                let process = try await AppExtensionProcess(configuration: .init(
                    identity: ChannelTests.pythonIdentity("request-flood"),
                    sendQueueLimit: .init(bytes: 64 << 10, fileDescriptors: 8)))
                let connection = try await process.makeConnection(handlers: handlers)
                let before = residentKiB()
                // The extension floods once it has this request, and answers it at the end.
                let sampler = Task {
                    var most = before
                    while !Task.isCancelled {
                        most = max(most, residentKiB())
                        try? await Task.sleep(for: .milliseconds(50))
                    }
                    return most
                }
                // The extension floods once it has this request, and answers it at the end.
                let outcome = Task { try await connection.send(HostFixtures.message("go")) }
                let answer = try await outcome.value
                sampler.cancel()
                let most = await sampler.value
                let reply = HostFixtures.text(answer).split(separator: " ").compactMap { Int($0) }
                let mostRunning = counts.mostRunning.load(ordering: .relaxed)
                log.write("sent, answered: \(reply); most handled at once \(mostRunning); resident \(before) -> \(most) KiB")
                if mostRunning > limit { fail("\(mostRunning) requests handled at once, over the limit \(limit)") }
                guard reply.count == 2, reply[0] > 0, reply[0] == reply[1] else { fail("not every request answered: \(reply)") }
                if counts.handled.load(ordering: .relaxed) != reply[0] { fail("handled \(counts.handled.load(ordering: .relaxed)) of \(reply[0])") }
                // The limit's tasks, the 64 KiB send queue and a frame or two: far below this.
                if most - before > 48 << 10 { fail("resident memory grew from \(before) KiB to \(most) KiB") }
                connection.invalidate()
                process.invalidate()
            } catch {
                fail("\(error)")
            }
            exit(0)
        }
        log.finish(failed: result == nil)
    }

    @Test("one-way messages to a handler that waits: the extension's writes block after a bounded number, none is lost")
    func oneWayFlood() async throws {
        let counts = Counts()
        let (opened, open) = AsyncStream<Void>.makeStream()
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let handlers = ExtensionConnection.Handlers(onOneWay: { _ in
            if counts.handled.add(1, ordering: .relaxed).newValue == 1 {
                arrival.yield()
                for await _ in opened { break }  // the first one waits for the test
            }
        })
        let process = try await AppExtensionProcess(configuration: .init(identity: ChannelTests.pythonIdentity("oneway-flood")))
        defer { process.invalidate() }
        let connection = try await process.makeConnection(handlers: handlers)
        defer { connection.invalidate() }
        let outcome = Task { try await connection.send(HostFixtures.message("go")) }
        for await _ in arrived { break }
        // The extension keeps writing meanwhile; the host, at its limit, stops reading.
        try await Task.sleep(for: .seconds(2))
        open.yield()
        let reply = HostFixtures.text(try await outcome.value).split(separator: " ").compactMap { Int($0) }
        try #require(reply.count == 2)
        let (total, beforeStall) = (reply[0], reply[1])
        // The default limit (64) and what the socket and the receiver's buffer hold: a few hundred.
        #expect(beforeStall < 5000, "the extension wrote \(beforeStall) of \(total) one-way messages before it had to wait")
        #expect(await HostFixtures.eventually { counts.handled.load(ordering: .relaxed) == total }, "\(counts.handled.load(ordering: .relaxed)) of \(total)")
    }
}
