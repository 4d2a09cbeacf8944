import Glibc
import Synchronization

/// The one long-lived thread that clones every sandbox.
///
/// PR_SET_PDEATHSIG fires when the parent *thread* exits, not the process; Swift's
/// concurrency and Dispatch threads come and go, so a sandbox cloned from one of them could be
/// killed at a random moment. Cloning from a thread that never exits ties each sandbox's
/// lifetime to the supervisor process instead.
/// `@unchecked`: the semaphore is thread-safe by design and lives as long as the thread.
final class SpawnerThread: @unchecked Sendable {
    private let jobs = Mutex<[Job]>([])
    /// Counts queued jobs; the thread sleeps on it (a semaphore needs a stable address).
    private let pending: UnsafeMutablePointer<sem_t>

    init() throws(SandboxError) {
        pending = .allocate(capacity: 1)
        sem_init(pending, 0, 0)
        do {
            try DetachedThread.start(name: "xsb-spawner", stackSize: 1 << 20) { [self] in self.loop() }
        } catch {
            sem_destroy(pending)
            pending.deallocate()
            throw error
        }
    }

    /// Runs `body` on the spawner thread and returns its result. `body` and what it captures
    /// are handed over whole (`sending`): the caller keeps no reference to them.
    func run<T: Sendable>(_ body: sending @escaping () -> T) async -> T {
        let result = OnceContinuation<T>()
        let job = Job { result.resume(body()) }
        jobs.withLock { $0.append(job) }
        sem_post(pending)
        return await result.value
    }

    /// One job, handed to the spawner thread whole (`sending`): its closure and what that
    /// captures need not be Sendable. The lock is the job's own, taken once, by that thread.
    private final class Job: Sendable {
        private let work: Mutex<(() -> Void)?>

        init(_ work: sending @escaping () -> Void) {
            self.work = Mutex(work)
        }

        func run() {
            work.withLock { work in
                work?()
                work = nil
            }
        }
    }

    private func loop() -> Never {
        while true {
            while sem_wait(pending) != 0 {}  // EINTR
            let job = jobs.withLock { $0.removeFirst() }
            job.run()
        }
    }
}
