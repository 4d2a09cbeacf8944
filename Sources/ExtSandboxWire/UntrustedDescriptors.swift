#if canImport(Glibc)
import Glibc
import SandboxSystem
#endif

/// Closing file descriptors that another process sent (`SCM_RIGHTS`), which that process may have
/// made to block whoever closes them.
///
/// The last `close` of a TCP socket whose `SO_LINGER` is set waits until its unsent data is
/// acknowledged, up to the linger time, and a peer that never reads never acknowledges it. The
/// last close of a Unix socket releases, in the closing thread, the descriptors queued in it (in
/// messages nobody read, in connections nobody accepted), and they may be such sockets. So a
/// process closes what a peer it does not trust sent it (the host, an extension's descriptors)
/// with ``close(_:)``, which never blocks its caller:
///
/// - a socket is made non-lingering (`SO_LINGER` off): its close returns at once, and the kernel
///   finishes or resets the connection in the background;
/// - a Unix socket is shut down (its peers can queue nothing more) and emptied: the descriptors
///   queued in it, and the connections waiting to be accepted, are taken out and closed the same
///   way, before the socket itself;
/// - the work runs on threads of its own (at most ``maximumClosingThreads``, started when first
///   needed), never on the caller's and under no lock of the caller's.
///
/// So the descriptors are abandoned, not just closed: a socket shut down is shut down for every
/// descriptor that refers to it. Do not pass one whose socket is also reached through a
/// descriptor that is kept (a `dup` of it).
///
/// A ``FrameSocket`` (or ``FrameReceiver``, ``FrameDecoder``) made with `untrustedPeer` closes
/// every descriptor it received and does not hand out (the fds of a malformed frame, fds no frame
/// declares, a frame's fds when its connection breaks mid-frame) this way. The fds of frames a
/// ``FrameSender`` never sent are the sender's own, usually copies of its caller's: those are
/// only closed on these threads (`closeOffThread`), never abandoned.
public enum UntrustedDescriptors {
    /// The most threads that close at once. Another starts when descriptors wait and none is idle
    /// (one is held by a close that the measures above did not defuse).
    public static let maximumClosingThreads = 4

    /// Closes `fds` without blocking the caller; negative numbers are skipped. Takes ownership:
    /// the caller must not use the numbers afterwards. Returns at once; the descriptors are closed
    /// shortly after (see ``waitUntilClosed()``). Given none, it does nothing.
    public static func close(_ fds: [Int32]) {
        let owned = fds.filter { $0 >= 0 }
        guard !owned.isEmpty else { return }
        DescriptorCloser.shared.enqueue(owned.map { .abandon($0) })
    }

    /// Closes what a peer sent (or what may be a peer's, forwarded): with ``close(_:)`` when the
    /// peer is `untrusted`, else with `close(2)` on the spot. The wire layer's choice, per socket:
    /// an extension trusts its host, and its seccomp filter may not allow what ``close(_:)`` does.
    static func close(_ fds: [Int32], untrusted: Bool) {
        if untrusted { close(fds) } else { closeDescriptors(fds) }
    }

    /// ``close(_:)`` of owned descriptors a peer that is not trusted sent (a frame's, dropped),
    /// in one batch: each one still open is released to the closing threads. A frame's own
    /// `closeFDs()` would hand them over one at a time, which a flood of fds makes costly.
    public static func close(_ descriptors: [FileDescriptor]) {
        close(descriptors.releaseAll())
    }

    /// Owned descriptors for `fds`, which a peer sent: closed with ``close(_:)`` when the peer is
    /// `untrusted`, else with `close(2)`. Takes ownership of the numbers (negative ones skipped).
    static func adopt(_ fds: [Int32], untrusted: Bool) -> [FileDescriptor] {
        fds.compactMap { fd in
            untrusted ? FileDescriptor(adopting: fd, closingWith: { close([$0]) }) : FileDescriptor(adopting: fd)
        }
    }

    /// Closes `descriptors` on the closing threads, each its own way (``FileDescriptor/close()``):
    /// a plain `close(2)` for the sender's own copies, whose socket the caller's descriptors
    /// share, so it is neither shut down nor made non-lingering; ``close(_:)`` for one that
    /// carries it. The caller never waits: the copy may be the last reference to a Unix socket
    /// in which a peer queued descriptors, and that close releases them in the closing thread.
    static func closeOffThread(_ descriptors: [FileDescriptor]) {
        let open = descriptors.filter(\.isOpen)
        guard !open.isEmpty else { return }
        DescriptorCloser.shared.enqueue(open.map { .close($0) })
    }

    /// Returns once every descriptor handed to ``close(_:)`` (or `closeOffThread`) so far (and
    /// meanwhile) is closed: for tests and tools that count descriptors. It waits as long as those
    /// closes take.
    public static func waitUntilClosed() {
        DescriptorCloser.shared.waitUntilIdle()
    }

    /// At most this many messages (or connections) are taken out of one Unix socket: its peers
    /// can add none once it is shut down, so this only bounds a loop that should end by itself.
    static let drainLimit = 100_000

    /// What a closing thread does with one descriptor (`scratch`: its buffers for `recvmsg`).
    static func abandon(_ fd: Int32, _ scratch: DrainBuffers) {
        var domain: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        // ENOTSOCK for anything but a socket, which needs nothing more.
        if getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &size) == 0 {
            var off = linger(l_onoff: 0, l_linger: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, socklen_t(MemoryLayout<linger>.size))
            if domain == AF_UNIX { close(takeQueued(from: fd, scratch)) }
        }
        _ = Glibc.close(fd)
    }

    /// Shuts the Unix socket `fd` down and takes out what its last close would release in this
    /// thread: the fds of the messages queued in it, or the connections waiting to be accepted.
    static func takeQueued(from fd: Int32, _ scratch: DrainBuffers) -> [Int32] {
        _ = shutdown(fd, Int32(SHUT_RDWR))
        // An accept must not wait (recvmsg is told so itself).
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        var taken: [Int32] = []
        var listening: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening != 0 {
            for _ in 0..<drainLimit {
                // (accept4 with SOCK_CLOEXEC is not visible to Swift without _GNU_SOURCE.)
                let connection = accept(fd, nil, nil)
                guard connection >= 0 else { break }
                _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
                taken.append(connection)
            }
            return taken
        }
        for _ in 0..<drainLimit {
            let (count, fds, _) = receiveWithDescriptors(from: fd, into: scratch.data, control: scratch.control, flags: Int32(MSG_DONTWAIT))
            taken += fds
            if count <= 0 && fds.isEmpty { break }
        }
        return taken
    }
}

/// A closing thread's buffers for emptying Unix sockets.
final class DrainBuffers {
    let data = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
    let control = UnsafeMutableRawBufferPointer.allocate(byteCount: FrameSocket.receiveControlBufferSize, alignment: 16)

    deinit {
        data.deallocate()
        control.deallocate()
    }
}

/// The queue of descriptors to close and the threads that close them (a pthread mutex and
/// condition variables: the threads sleep in the kernel while there is nothing to close).
final class DescriptorCloser: @unchecked Sendable {
    static let shared = DescriptorCloser()

    /// One descriptor to close, and how.
    enum Closing {
        /// What a peer sent: ``UntrustedDescriptors/abandon(_:_:)``.
        case abandon(Int32)
        /// The owner's own: closed its own way, nothing changed on its socket.
        case close(FileDescriptor)
    }

    /// A closing thread's stack: it runs a loop and a few system calls.
    private static let stackSize = 256 << 10

    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let workAvailable = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let becameIdle = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    // Under `lock`.
    private var queue: [Closing] = []
    private var head = 0
    private var threads = 0
    private var idleThreads = 0
    /// Descriptors queued or being closed.
    private var unclosed = 0

    private init() {
        pthread_mutex_init(lock, nil)
        pthread_cond_init(workAvailable, nil)
        pthread_cond_init(becameIdle, nil)
    }

    func enqueue(_ fds: [Closing]) {
        pthread_mutex_lock(lock)
        queue.append(contentsOf: fds)
        unclosed += fds.count
        let start = idleThreads == 0 && threads < UntrustedDescriptors.maximumClosingThreads
        if start { threads += 1 }
        pthread_cond_signal(workAvailable)
        pthread_mutex_unlock(lock)
        guard start, !startThread() else { return }
        pthread_mutex_lock(lock)
        threads -= 1
        let none = threads == 0
        pthread_mutex_unlock(lock)
        // No thread could be started and none runs: closed here, defused all the same (which is
        // what keeps a close from waiting), rather than leaked.
        if none { work(untilEmpty: true) }
    }

    func waitUntilIdle() {
        pthread_mutex_lock(lock)
        while unclosed > 0 { pthread_cond_wait(becameIdle, lock) }
        pthread_mutex_unlock(lock)
    }

    /// Takes descriptors from the queue and closes them (abandons what a peer sent), one at a time, outside the lock; waits
    /// for more when it is empty (or returns, `untilEmpty`).
    private func work(untilEmpty: Bool) {
        let scratch = DrainBuffers()
        pthread_mutex_lock(lock)
        while true {
            while head == queue.count {
                if untilEmpty {
                    pthread_mutex_unlock(lock)
                    return
                }
                idleThreads += 1
                pthread_cond_wait(workAvailable, lock)
                idleThreads -= 1
            }
            let item = queue[head]
            head += 1
            if head == queue.count {
                queue.removeAll(keepingCapacity: queue.count <= 1024)
                head = 0
            } else if head >= 1024 {
                queue.removeFirst(head)
                head = 0
            }
            pthread_mutex_unlock(lock)
            switch item {
            case .abandon(let fd): UntrustedDescriptors.abandon(fd, scratch)
            case .close(let descriptor): descriptor.close()
            }
            pthread_mutex_lock(lock)
            unclosed -= 1
            if unclosed == 0 { pthread_cond_broadcast(becameIdle) }
        }
    }

    /// A detached thread named `xsb-fd-closer` (what ps and top show) running ``work(untilEmpty:)``, with the asynchronous signals blocked (as
    /// in the threads of the concurrency pool): the process's signals go to the threads that
    /// expect them. Returns whether it started.
    private func startThread() -> Bool {
        (try? DetachedThread.start(name: "xsb-fd-closer", stackSize: Self.stackSize, blockingAsyncSignals: true) {
            DescriptorCloser.shared.work(untilEmpty: false)
        }) != nil
    }
}
