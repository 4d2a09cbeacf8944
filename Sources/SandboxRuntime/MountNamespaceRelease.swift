import Glibc
import SandboxSystem
import Synchronization

/// Lets go of ended sandboxes' mount namespaces off every caller's path.
///
/// A sandbox's init passes its mount namespace with its EXIT report, so that its exit only drops a
/// count and it can be reaped at once. Whoever closes the last reference then unmounts the
/// sandbox's tree and waits for an RCU grace period before the superblocks go, which would hold
/// up the monitor thread or a caller; so one thread, started with the second end, closes them,
/// after the end has been reported. The first end's is closed by the thread that reports it,
/// once it has told the waiters, so that a one-shot caller (`extsandbox exec`) starts no thread.
/// At most ``capacity`` wait for the closing thread: beyond that the reporting thread closes it
/// itself, so that a burst of ends never holds many more of the host's descriptors (its
/// `RLIMIT_NOFILE` is what bounds how many sandboxes it runs).
/// `@unchecked`: the semaphore's address never changes, and `sem_t` is made for threads.
final class MountNamespaceRelease: @unchecked Sendable {
    static let shared = MountNamespaceRelease()

    private enum Closer { case notNeededYet, wanted, running, unavailable }

    private struct Queue {
        var waiting: [FileDescriptor] = []
        /// How many are being closed now (by the closing thread, or by reporting threads).
        var closing = 0
        var closer = Closer.notNeededYet
    }

    /// The most namespaces waiting for the closing thread.
    let capacity: Int
    private let queue = Mutex(Queue())
    /// Posted once per namespace queued.
    private let queued: UnsafeMutablePointer<sem_t> = .allocate(capacity: 1)

    init(capacity: Int = 64) {
        self.capacity = capacity
        sem_init(queued, 0, 0)
    }

    deinit {
        sem_destroy(queued)
        queued.deallocate()
    }

    /// Closes `namespace` after `first` has run: on the closing thread, which is woken only then
    /// (so that it does not compete with whoever `first` wakes), or on this thread (the first
    /// end's, or when that thread cannot start or already has ``capacity`` waiting). It counts
    /// as ``pending`` before `first` runs.
    func release(_ namespace: FileDescriptor, after first: () -> Void = {}) {
        let handedOver = queue.withLock { queue -> Bool in
            switch queue.closer {
            case .notNeededYet: queue.closer = .wanted
            case .wanted: queue.closer = startCloser() ? .running : .unavailable
            case .running, .unavailable: break
            }
            guard queue.closer == .running, queue.waiting.count < capacity else {
                queue.closing += 1
                return false
            }
            queue.waiting.append(namespace)
            return true
        }
        first()
        if handedOver {
            sem_post(queued)
            return
        }
        namespace.close()
        queue.withLock { $0.closing -= 1 }
    }

    /// How many are handed over and not closed yet: a test that counts the host's fds waits
    /// for none.
    var pending: Int { queue.withLock { $0.waiting.count + $0.closing } }

    private func startCloser() -> Bool {
        do {
            try SupervisorThread.start(name: "xsb-mntns-close", stackSize: 256 << 10) { [self] in
                while true {
                    while sem_wait(queued) != 0 {}  // EINTR
                    let next = queue.withLock { queue -> FileDescriptor? in
                        guard !queue.waiting.isEmpty else { return nil }
                        queue.closing += 1
                        return queue.waiting.removeFirst()
                    }
                    guard let next else { continue }
                    next.close()
                    queue.withLock { $0.closing -= 1 }
                }
            }
            return true
        } catch {
            return false
        }
    }
}
