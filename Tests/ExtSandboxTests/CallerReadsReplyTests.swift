import CSandboxSystem
import ExtSandboxWire
import Foundation
import Glibc
import SandboxRuntime
import Synchronization
import Testing
@testable import ExtSandbox
@testable import SandboxSystem

/// A caller reading its own reply (`claimReplyReading` before the request is written,
/// `readReplyBriefly` after): the monitor thread is kept off the socket meanwhile, only one caller
/// in the process looks at a time, and a reply that comes late still arrives through the monitor.
/// Driven directly, on a connection to a socket this test holds and a monitor of its own.
@Suite("A caller reading its own reply")
struct CallerReadsReplyTests {
    /// The connection's host end, its monitor, and the peer's end (a HELLO already exchanged).
    struct Harness: @unchecked Sendable {
        let connection: ExtensionConnection
        let monitor: EventMonitor
        let hostFD: Int32
        let peer: FrameSocket
    }

    static func makeHarness() async throws -> Harness {
        let (host, peerEnd) = try FrameSocket.makeSocketPair()
        let peer = FrameSocket(descriptor: peerEnd)
        let monitor = try EventMonitor()
        let connection = ExtensionConnection(descriptor: host, monitor: monitor, name: "host", onClose: {})
        try peer.send(.hello(Hello(name: "peer")))
        try await connection.handshake(timeout: .seconds(30))
        #expect(try peer.receive()?.kind == .hello)
        return Harness(connection: connection, monitor: monitor, hostFD: host.rawValue, peer: peer)
    }

    /// The events the monitor's epoll set watches `fd` for (from /proc/self/fdinfo), or nil when
    /// no epoll set of this process watches it.
    static func watchedEvents(of fd: Int32) -> UInt32? {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fdinfo")) ?? []
        for entry in entries {
            guard let text = try? String(contentsOfFile: "/proc/self/fdinfo/\(entry)", encoding: .utf8) else { continue }
            for line in text.split(separator: "\n") where line.hasPrefix("tfd:") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count >= 4, Int32(fields[1]) == fd, fields[2] == "events:" else { continue }
                return UInt32(fields[3], radix: 16)
            }
        }
        return nil
    }

    /// Request `id` as pending on `connection`, with a continuation nobody waits for (the tests
    /// below drive the reading by hand).
    static func pretendPending(_ id: UInt64, on connection: ExtensionConnection) async throws {
        let task = Task {
            await withUnsafeContinuation { (continuation: ExtensionConnection.Reply) in
                connection.state.withLock { $0.pending[id] = continuation }
            }
        }
        _ = task
        for _ in 0..<10_000 where connection.state.withLock({ $0.pending[id] == nil }) { try await Task.sleep(for: .milliseconds(1)) }
        try #require(connection.state.withLock { $0.pending[id] != nil })
    }

    /// `claimReplyReading` for request `id`, tried again while another caller in this process
    /// (a test running in parallel) holds the one place: it lets go within the spin's budget.
    static func claim(_ id: UInt64, on connection: ExtensionConnection) async throws -> Bool {
        for _ in 0..<2_000 {
            if connection.output.withLock({ connection.claimReplyReading($0, to: id) }) { return true }
            try await Task.sleep(for: .microseconds(200))
        }
        return false
    }

    /// Request `id` made pending on `connection`, then claimed (``claim(_:on:)``).
    static func pendAndClaim(_ id: UInt64, on connection: ExtensionConnection) async throws -> Bool {
        try await pretendPending(id, on: connection)
        return try await claim(id, on: connection)
    }

    @Test("while the caller looks for its reply the monitor does not watch the socket's readability, and does again after")
    func monitorStaysOffTheSocket() async throws {
        let harness = try await Self.makeHarness()
        defer { harness.connection.invalidate() }
        #expect((Self.watchedEvents(of: harness.hostFD) ?? 0) & EventMonitor.readable != 0)
        #expect(try await Self.pendAndClaim(7, on: harness.connection))
        // Before the request is written: an answer that came at once would wake no monitor.
        #expect((Self.watchedEvents(of: harness.hostFD) ?? EventMonitor.readable) & EventMonitor.readable == 0,
                "the monitor watched the socket's readability while the caller looked for the reply")
        try harness.peer.send(.reply(id: 7, payload: Array("seven".utf8), fds: []))
        harness.connection.readReplyBriefly(to: 7)
        #expect(harness.connection.state.withLock { $0.pending[7] == nil }, "the reply was not read by the caller")
        #expect((Self.watchedEvents(of: harness.hostFD) ?? 0) & EventMonitor.readable != 0, "the monitor does not watch the socket again")
    }

    @Test("one caller in the process looks at a time: a second claim is refused and leaves the monitor watching")
    func oneCallerAtATime() async throws {
        let first = try await Self.makeHarness()
        let second = try await Self.makeHarness()
        defer {
            first.connection.invalidate()
            second.connection.invalidate()
        }
        try await Self.pretendPending(1, on: first.connection)
        try await Self.pretendPending(1, on: second.connection)
        #expect(try await Self.claim(1, on: first.connection))
        #expect(!second.connection.output.withLock { second.connection.claimReplyReading($0, to: 1) })
        #expect((Self.watchedEvents(of: second.hostFD) ?? 0) & EventMonitor.readable != 0)
        try first.peer.send(.reply(id: 1, payload: [], fds: []))
        first.connection.readReplyBriefly(to: 1)
        // The second's reply reaches it through its monitor.
        try second.peer.send(.reply(id: 1, payload: [], fds: []))
        for _ in 0..<2_000 where second.connection.state.withLock({ $0.pending[1] != nil }) { try await Task.sleep(for: .milliseconds(5)) }
        #expect(second.connection.state.withLock { $0.pending[1] == nil }, "the monitor did not read the second connection's reply")
    }

    @Test("a reply later than the caller looks arrives through the monitor, and the next few requests leave it to the monitor")
    func lateReplyThroughTheMonitor() async throws {
        let harness = try await Self.makeHarness()
        defer { harness.connection.invalidate() }
        #expect(try await Self.pendAndClaim(3, on: harness.connection))
        // Nothing comes within the look: the caller gives up and the monitor watches again.
        harness.connection.readReplyBriefly(to: 3)
        #expect(harness.connection.state.withLock { $0.pending[3] != nil })
        #expect(harness.connection.state.withLock { $0.waitsToSkip } == ExtensionConnection.waitsSkippedAfterTimeout)
        #expect((Self.watchedEvents(of: harness.hostFD) ?? 0) & EventMonitor.readable != 0)
        // The late reply reaches its request through the monitor.
        try harness.peer.send(.reply(id: 3, payload: Array("late".utf8), fds: []))
        for _ in 0..<2_000 where harness.connection.state.withLock({ $0.pending[3] != nil }) { try await Task.sleep(for: .milliseconds(5)) }
        #expect(harness.connection.state.withLock { $0.pending[3] == nil }, "the monitor did not read the late reply")
        // The next requests are left to the monitor: each claim is refused and counts one skip
        // (a claim that found another test's caller looking counts none: tried again).
        try await Self.pretendPending(4, on: harness.connection)
        for expected in (0..<ExtensionConnection.waitsSkippedAfterTimeout).reversed() {
            var skipped = false
            for _ in 0..<2_000 where !skipped {
                #expect(!harness.connection.output.withLock { harness.connection.claimReplyReading($0, to: 4) })
                skipped = harness.connection.state.withLock { $0.waitsToSkip } == expected
                if !skipped { try await Task.sleep(for: .microseconds(200)) }
            }
            #expect(skipped, "skips left: \(harness.connection.state.withLock { $0.waitsToSkip }), expected \(expected)")
        }
        // Then the caller looks again.
        #expect(try await Self.claim(4, on: harness.connection))
        try harness.peer.send(.reply(id: 4, payload: [], fds: []))
        harness.connection.readReplyBriefly(to: 4)
        #expect(harness.connection.state.withLock { $0.pending[4] == nil })
    }

    @Test("frames other than the reply do not spare the connection its skips: a late reply after junk still counts")
    func junkBeforeALateReply() async throws {
        let harness = try await Self.makeHarness()
        defer { harness.connection.invalidate() }
        #expect(try await Self.pendAndClaim(5, on: harness.connection))
        // An extension that writes something cheap within the look, and its reply only later.
        try harness.peer.send(.cancel(id: 999))
        harness.connection.readReplyBriefly(to: 5)
        #expect(harness.connection.state.withLock { $0.pending[5] != nil })
        #expect(harness.connection.state.withLock { $0.waitsToSkip } == ExtensionConnection.waitsSkippedAfterTimeout,
                "the look found only a CANCEL for an unknown id, yet the next requests are looked for again")
        try harness.peer.send(.reply(id: 5, payload: [], fds: []))
    }

    /// Holds `monitor`'s thread in a handler of another registration until the returned
    /// function is called: what a caller leaves in a socket then stays there to be seen.
    static func holdMonitor(_ monitor: EventMonitor) throws -> @Sendable () -> Void {
        var ends: [Int32] = [-1, -1]
        try #require(pipe(&ends) == 0)
        let (entered, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let readEnd = try #require(FileDescriptor(adopting: ends[0]))
        let writeEnd = ends[1]
        let token = try monitor.add(fd: readEnd, events: EventMonitor.readable) { _ in
            entered.signal()
            release.wait()
            var byte: UInt8 = 0
            _ = read(readEnd.rawValue, &byte, 1)
        }
        var byte: UInt8 = 1
        #expect(write(writeEnd, &byte, 1) == 1)
        entered.wait()
        return {
            release.signal()
            monitor.remove(fd: readEnd, token: token)
            readEnd.close()
            close(writeEnd)
        }
    }

    @Test("the caller reads its replies one request after another, not the monitor")
    func consecutiveReplies() async throws {
        let harness = try await Self.makeHarness()
        defer { harness.connection.invalidate() }
        let release = try Self.holdMonitor(harness.monitor)
        defer { release() }
        for id: UInt64 in 10..<15 {
            #expect(try await Self.pendAndClaim(id, on: harness.connection))
            try harness.peer.send(.reply(id: id, payload: Array("r\(id)".utf8), fds: []))
            harness.connection.readReplyBriefly(to: id)
            #expect(harness.connection.state.withLock { $0.pending[id] == nil }, "reply \(id) was left to the monitor")
            #expect(harness.connection.state.withLock { $0.waitsToSkip } == 0)
        }
    }

    @Test("the caller stops reading once its reply is in: the rest of a flood is left to the monitor")
    func callerStopsAfterItsReply() async throws {
        let harness = try await Self.makeHarness()
        defer { harness.connection.invalidate() }
        #expect(try await Self.pendAndClaim(6, on: harness.connection))
        // The reply, then far more one-way messages (no handler: dropped) than one read takes
        // (and less than the socket holds: these writes must not block).
        try harness.peer.send(.reply(id: 6, payload: [], fds: []))
        let flood = [UInt8](repeating: 0x66, count: 4000)
        for _ in 0..<30 { try harness.peer.send(.oneway(payload: flood)) }
        var unread: Int32 = 0
        #expect(ioctl(harness.hostFD, UInt(FIONREAD), &unread) == 0 && unread > 64 * 1024)
        // The monitor thread held until the count below, so that what the caller leaves is there.
        let release = try Self.holdMonitor(harness.monitor)
        harness.connection.readReplyBriefly(to: 6)
        #expect(harness.connection.state.withLock { $0.pending[6] == nil })
        #expect(ioctl(harness.hostFD, UInt(FIONREAD), &unread) == 0)
        #expect(unread > 0, "the caller read the whole flood on its own thread")
        release()
        // The monitor, watching again, reads the rest.
        for _ in 0..<2_000 where ioctl(harness.hostFD, UInt(FIONREAD), &unread) == 0 && unread > 0 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(unread == 0, "the monitor did not read what the caller left")
        #expect(harness.connection.isOpen)
    }

    @Test("the spin reports readable data, a hang-up, and nothing once its budget is spent")
    func spinOutcomes() throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { close(pair[0]) }
        let started = ContinuousClock.now
        #expect(xsb_spin_until_readable(pair[0], 2_000_000) == 0)
        #expect(ContinuousClock.now - started >= .milliseconds(2))
        var byte: UInt8 = 1
        #expect(write(pair[1], &byte, 1) == 1)
        #expect(xsb_spin_until_readable(pair[0], 1_000_000_000) == 1)
        #expect(read(pair[0], &byte, 1) == 1)
        close(pair[1])
        #expect(xsb_spin_until_readable(pair[0], 1_000_000_000) == 1, "a hang-up is something to read (the end)")
    }
}
