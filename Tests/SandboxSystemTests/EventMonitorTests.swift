import Glibc
@testable import SandboxSystem
import Synchronization
import Testing
import TestSupport

/// `EventMonitor.remove(fd:token:)`: once it returns, the registration's handler is not running
/// (the caller may close the fd and free the handler's state), and a handler may remove its own
/// registration without waiting for itself. Each test has a monitor of its own: a handler that
/// sleeps on the shared one would delay every other test's events.
@Suite("Event monitor", .offThePool)
struct EventMonitorTests {
    /// A pipe whose read end becomes readable when `trigger()` writes a byte.
    final class Pipe: Sendable {
        let readEnd: FileDescriptor
        let writeEnd: FileDescriptor

        init() throws {
            var fds: [Int32] = [-1, -1]
            guard pipe(&fds) == 0 else { throw Errno(errno) }
            for fd in fds {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            }
            readEnd = try #require(FileDescriptor(adopting: fds[0]))
            writeEnd = try #require(FileDescriptor(adopting: fds[1]))
        }

        func trigger() {
            var byte: UInt8 = 1
            _ = write(writeEnd.rawValue, &byte, 1)
        }

        func drain() {
            var buffer = [UInt8](repeating: 0, count: 64)
            while read(readEnd.rawValue, &buffer, buffer.count) > 0 {}
        }
    }

    /// Waits (up to `seconds`) until `condition` holds.
    static func waitUntil(seconds: Double = 10, _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while !condition() {
            if ContinuousClock.now > deadline { return false }
            usleep(1000)
        }
        return true
    }

    @Test("remove waits for the registration's handler that is running on the monitor thread")
    func removeWaitsForRunningHandler() throws {
        let monitor = try EventMonitor()
        let pipe = try Pipe()
        let started = Atomic<Bool>(false)
        let finished = Atomic<Bool>(false)
        let token = try monitor.add(fd: pipe.readEnd) { _ in
            pipe.drain()
            started.store(true, ordering: .releasing)
            usleep(200_000)  // a handler slower than it should be; remove must still wait for it
            finished.store(true, ordering: .releasing)
        }
        pipe.trigger()
        #expect(Self.waitUntil { started.load(ordering: .acquiring) }, "the handler never ran")
        let before = ContinuousClock.now
        monitor.remove(fd: pipe.readEnd, token: token)
        let waited = ContinuousClock.now - before
        let handlerDone = finished.load(ordering: .acquiring)
        #expect(handlerDone, "remove returned while the handler was still running (after \(waited))")
    }

    @Test("remove from inside the registration's own handler returns at once (no deadlock)")
    func removeFromOwnHandler() throws {
        let monitor = try EventMonitor()
        let pipe = try Pipe()
        let token = Mutex<UInt64?>(nil)
        let calls = Atomic<Int>(0)
        let removed = Atomic<Bool>(false)
        let registered = try monitor.add(fd: pipe.readEnd) { _ in
            calls.add(1, ordering: .relaxed)
            // Not drained: level-triggered, the handler would run again if the removal did not hold.
            guard let own = token.withLock({ $0 }) else { return }
            monitor.remove(fd: pipe.readEnd, token: own)
            removed.store(true, ordering: .releasing)
        }
        token.withLock { $0 = registered }
        pipe.trigger()
        #expect(Self.waitUntil { removed.load(ordering: .acquiring) }, "the handler's own remove did not return (deadlock)")
        // The monitor thread goes on serving other registrations.
        let other = try Pipe()
        let otherRan = Atomic<Bool>(false)
        let otherToken = try monitor.add(fd: other.readEnd) { _ in
            other.drain()
            otherRan.store(true, ordering: .releasing)
        }
        other.trigger()
        #expect(Self.waitUntil { otherRan.load(ordering: .acquiring) }, "the monitor thread is stuck")
        monitor.remove(fd: other.readEnd, token: otherToken)
        let callCount = calls.load(ordering: .relaxed)
        #expect(callCount == 1, "the removed handler ran again")
    }

    @Test("remove of another registration from a handler returns at once")
    func removeOtherFromHandler() throws {
        let monitor = try EventMonitor()
        let first = try Pipe(), second = try Pipe()
        let secondToken = try monitor.add(fd: second.readEnd) { _ in second.drain() }
        let done = Atomic<Bool>(false)
        let firstToken = try monitor.add(fd: first.readEnd) { _ in
            first.drain()
            monitor.remove(fd: second.readEnd, token: secondToken)
            done.store(true, ordering: .releasing)
        }
        first.trigger()
        #expect(Self.waitUntil { done.load(ordering: .acquiring) }, "removing another registration from a handler did not return")
        monitor.remove(fd: first.readEnd, token: firstToken)
    }

    @Test("remove of a registration not (or no longer) watched returns at once while no handler runs")
    func removeUnwatched() throws {
        let monitor = try EventMonitor()
        let pipe = try Pipe()
        // A connection closed before it was ever watched removes token 0 (its initial value).
        let returned = Atomic<Bool>(false)
        try DetachedThread.start(name: "xsb-test-remove") {
            monitor.remove(fd: pipe.readEnd, token: 0)
            monitor.remove(fd: pipe.readEnd, token: 12345)
            returned.store(true, ordering: .releasing)
        }
        #expect(Self.waitUntil { returned.load(ordering: .acquiring) }, "remove of an unwatched registration waited (for nothing)")
    }

    @Test("a registration borrows its descriptor: it stays open, and watched, until removed, though its owner lets go")
    func registrationKeepsTheDescriptorUntilRemoved() throws {
        let monitor = try EventMonitor()
        let ran = Atomic<Int>(0)
        var fds: [Int32] = [-1, -1]
        try #require(pipe(&fds) == 0)
        let writeEnd = try #require(FileDescriptor(adopting: fds[1]))
        var readEnd = FileDescriptor(adopting: fds[0])
        let token = try monitor.add(fd: try #require(readEnd)) { _ in ran.add(1, ordering: .relaxed) }
        weak let lent = readEnd
        readEnd = nil  // the owner's last reference: the monitor still holds the descriptor
        #expect(lent != nil, "the monitor let go of a descriptor it still watches")
        #expect(fcntl(fds[0], F_GETFD) >= 0, "a watched descriptor was closed")
        var byte: UInt8 = 1
        _ = write(writeEnd.rawValue, &byte, 1)
        #expect(Self.waitUntil { ran.load(ordering: .relaxed) > 0 }, "the borrowed descriptor is no longer watched")
        monitor.remove(fd: try #require(lent), token: token)
        #expect(lent == nil, "the monitor kept the descriptor after its removal")
    }

    @Test("a registration the kernel refuses throws the call and its errno, and leaves nothing registered")
    func refusedRegistrationIsTyped() throws {
        let monitor = try EventMonitor()
        let pipe = try Pipe()
        let token = try monitor.add(fd: pipe.readEnd) { _ in pipe.drain() }
        defer { monitor.remove(fd: pipe.readEnd, token: token) }
        #expect(throws: EventMonitor.Failure(operation: "epoll_ctl add", errorNumber: EEXIST)) {
            try monitor.add(fd: pipe.readEnd) { _ in }
        }
    }
}
