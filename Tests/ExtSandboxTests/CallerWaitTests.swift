import ExtSandboxWire
import Foundation
import Glibc
import SandboxRuntime
import Synchronization
import Testing
@testable import ExtSandbox
@testable import SandboxSystem

/// A caller's brief wait for its own reply (`waitForReadableBriefly`): taken only when the
/// monitor thread, which would otherwise read the reply, last ran on another CPU, and with the
/// monitor kept off the socket meanwhile (it used to read the reply first as often as not).
/// Driven directly, on a connection to a socket this test holds and a monitor of its own.
@Suite("A caller's wait for its own reply")
struct CallerWaitTests {
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

    /// Pins the monitor thread to `cpu` and wakes it there once (a one-way message it reads).
    static func pinMonitor(_ harness: Harness, to cpu: Int32) async throws {
        var set = cpuSet(cpu)
        // The thread records itself once it runs.
        for _ in 0..<500 where harness.monitor.monitorThread.load(ordering: .relaxed) == 0 { try await Task.sleep(for: .milliseconds(2)) }
        let thread = harness.monitor.monitorThread.load(ordering: .relaxed)
        try #require(thread != 0)
        #expect(pinThread(pthread_t(thread), MemoryLayout<cpu_set_t>.size, &set) == 0)
        try harness.peer.send(.oneway(payload: Array("wake".utf8)))
        for _ in 0..<500 where harness.monitor.lastCPU != cpu { try await Task.sleep(for: .milliseconds(2)) }
        #expect(harness.monitor.lastCPU == cpu)
    }

    /// `pthread_setaffinity_np`, which Swift's Glibc module does not import (a GNU extension).
    static let pinThread = unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setaffinity_np"),
                                         to: (@convention(c) (pthread_t, Int, UnsafeRawPointer) -> Int32).self)

    static func cpuSet(_ cpu: Int32) -> cpu_set_t {
        var set = cpu_set_t()
        withUnsafeMutableBytes(of: &set) { $0.storeBytes(of: UInt64(1) << UInt64(cpu), toByteOffset: 0, as: UInt64.self) }
        return set
    }

    /// Runs `body` on a thread of its own pinned to `cpu`, and returns its result.
    static func onThread<T: Sendable>(pinnedTo cpu: Int32, _ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread {
                var set = cpuSet(cpu)
                _ = pinThread(pthread_self(), MemoryLayout<cpu_set_t>.size, &set)
                continuation.resume(returning: body())
            }.start()
        }
    }

    /// The events the monitor's epoll set watches `fd` for (from /proc/self/fdinfo), or nil.
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

    static let twoCPUs = sysconf(Int32(_SC_NPROCESSORS_ONLN)) >= 2

    @Test("waiting on another CPU than the monitor's, the caller has the socket to itself", .enabled(if: twoCPUs))
    func monitorStaysOffTheSocket() async throws {
        let harness = try await Self.makeHarness()
        defer { harness.connection.invalidate() }
        try await Self.pinMonitor(harness, to: 0)
        #expect((Self.watchedEvents(of: harness.hostFD) ?? 0) & EventMonitor.readable != 0)
        let fd = harness.hostFD
        // `alone` is asked again right before the wait: what the monitor watches then.
        let seen = await Self.onThread(pinnedTo: 1) { () -> [UInt32] in
            let recorded = Mutex<[UInt32]>([])
            harness.connection.waitForReadableBriefly { _ in
                recorded.withLock { $0.append(Self.watchedEvents(of: fd) ?? 0) }
                return true
            }
            return recorded.withLock { $0 }
        }
        #expect(seen.count == 2, "asked \(seen.count) times")
        #expect((seen.last ?? EventMonitor.readable) & EventMonitor.readable == 0, "the monitor watched the socket's readability during the wait")
        // Watched again afterwards: a message the caller did not wait for still arrives.
        #expect((Self.watchedEvents(of: harness.hostFD) ?? 0) & EventMonitor.readable != 0)
    }

    @Test("on the monitor's own CPU, the caller leaves the reply to it and does not wait", .enabled(if: twoCPUs))
    func noWaitOnTheMonitorsCPU() async throws {
        let harness = try await Self.makeHarness()
        defer { harness.connection.invalidate() }
        try await Self.pinMonitor(harness, to: 1)
        let asked = await Self.onThread(pinnedTo: 1) { () -> Int in
            let count = Mutex(0)
            harness.connection.waitForReadableBriefly { _ in
                count.withLock { $0 += 1 }
                return true
            }
            return count.withLock { $0 }
        }
        #expect(asked == 0, "the caller considered a timed wait \(asked) times")
    }
}
