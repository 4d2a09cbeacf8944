import Glibc
import SandboxSystem
import Synchronization
import Testing

/// A system call a signal interrupts is made again, and other failures keep their errno.
@Suite("Interrupted system calls")
struct InterruptedCallsTests {
    /// What the reading thread and the test share.
    final class Reader: Sendable {
        let fd: Int32
        let attempts = Atomic<Int>(0)
        let started = Atomic<Bool>(false)
        let finished = Atomic<Bool>(false)
        let result = Atomic<Int>(0)
        let error = Atomic<Int32>(0)
        init(fd: Int32) { self.fd = fd }

        /// Reads one byte, with SIGUSR1 deliverable to this thread (a new thread inherits the
        /// test thread's mask, and the concurrency pool's threads block asynchronous signals).
        func run() {
            var usr1 = sigset_t()
            sigemptyset(&usr1)
            sigaddset(&usr1, SIGUSR1)
            pthread_sigmask(SIG_UNBLOCK, &usr1, nil)
            started.store(true, ordering: .releasing)
            var byte: UInt8 = 0
            let count = retryingInterrupts {
                attempts.add(1, ordering: .relaxed)
                return read(fd, &byte, 1)
            }
            error.store(count < 0 ? errno : 0, ordering: .relaxed)
            result.store(count, ordering: .relaxed)
            finished.store(true, ordering: .releasing)
        }
    }

    /// A pipe whose ends close on exec (other suites start processes meanwhile).
    static func makePipe() throws -> [Int32] {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return ends
    }

    @Test("a read a signal interrupts (a handler without SA_RESTART) is made again and gets the data")
    func readInterruptedBySignalIsRetried() throws {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0  // no SA_RESTART: a blocked read fails with EINTR
        var previous = sigaction()
        try #require(sigaction(SIGUSR1, &action, &previous) == 0)
        defer { sigaction(SIGUSR1, &previous, nil) }

        let ends = try Self.makePipe()
        defer { close(ends[0]); close(ends[1]) }

        let reader = Reader(fd: ends[0])
        var thread = pthread_t()
        let context = Unmanaged.passRetained(reader).toOpaque()
        try #require(pthread_create(&thread, nil, { raw in
            Unmanaged<Reader>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, context) == 0)
        // Joinable, so that signalling it stays valid even once it has returned.
        defer { pthread_join(thread, nil) }

        let deadline = time(nil) + 20
        while !reader.started.load(ordering: .acquiring) && time(nil) < deadline { usleep(1000) }
        // Signal until a read has been interrupted and made again (a signal that arrives
        // before the thread blocks in read interrupts nothing).
        while reader.attempts.load(ordering: .relaxed) < 2 && !reader.finished.load(ordering: .acquiring)
            && time(nil) < deadline {
            pthread_kill(thread, SIGUSR1)
            usleep(5000)
        }
        var byte: UInt8 = 0x2a
        #expect(write(ends[1], &byte, 1) == 1)
        while !reader.finished.load(ordering: .acquiring) && time(nil) < deadline { usleep(1000) }

        let finished = reader.finished.load(ordering: .acquiring)
        let attempts = reader.attempts.load(ordering: .relaxed)
        let result = reader.result.load(ordering: .relaxed)
        let error = reader.error.load(ordering: .relaxed)
        #expect(finished)
        #expect(attempts >= 2)
        #expect(result == 1, "errno \(error)")
    }

    @Test("another failure is returned at once, its errno intact")
    func otherFailureKeepsErrno() {
        var calls = 0
        var byte: UInt8 = 0
        let count = retryingInterrupts {
            calls += 1
            return read(-1, &byte, 1)
        }
        let code = errno
        #expect(count == -1)
        #expect(code == EBADF)
        #expect(calls == 1)
    }

    @Test("writeAll writes everything, readToEnd reads it back, and stops at its limit")
    func writeAllAndReadToEnd() throws {
        let bytes = (0..<3000).map { UInt8(truncatingIfNeeded: $0) }
        let first = try Self.makePipe()
        defer { close(first[0]) }
        #expect(writeAll(first[1], bytes[1000...]))
        close(first[1])
        #expect(try readToEnd(first[0], limit: 2000).get() == Array(bytes[1000...]))

        let second = try Self.makePipe()
        defer { close(second[0]) }
        #expect(writeAll(second[1], bytes))
        close(second[1])
        #expect(readToEnd(second[0], limit: 2999) == .failure(Errno(EFBIG)))
    }

    @Test("readFully fills the buffer, or stops short where the file ends")
    func readFullyStopsAtEnd() throws {
        let ends = try Self.makePipe()
        defer { close(ends[0]) }
        #expect(writeAll(ends[1], [1, 2, 3, 4, 5] as [UInt8]))
        close(ends[1])
        var buffer = [UInt8](repeating: 0, count: 3)
        #expect(buffer.withUnsafeMutableBytes { readFully(ends[0], into: $0) } == 3)
        #expect(buffer == [1, 2, 3])
        #expect(buffer.withUnsafeMutableBytes { readFully(ends[0], into: $0) } == 2)
        #expect(buffer[..<2] == [4, 5])
    }
}
