import Dispatch
import ExtSandboxWire
import Glibc
import Synchronization

/// A task executor that is one connection's reader thread: a job enqueued from that thread
/// (a request just read, a handler continuing without having suspended) runs there at the next
/// ``runPending()``; a job enqueued from anywhere else (a handler resumed by a timer or another
/// task) goes to the global executor rather than waiting for the reader to wake. No pipe or
/// eventfd: the `hardened` policy allows neither.
final class ReaderExecutor: TaskExecutor, @unchecked Sendable {
    private struct Queue {
        var jobs: [UnownedJob] = []
        /// The connection ended: the thread may serve another one and never drains this again.
        var retired = false
    }

    private let queue = Mutex(Queue())
    private let thread = pthread_self()

    func enqueue(_ job: consuming ExecutorJob) {
        if pthread_equal(pthread_self(), thread) != 0 {
            let unowned = UnownedJob(job)
            let queued = queue.withLock { queue -> Bool in
                guard !queue.retired else { return false }
                queue.jobs.append(unowned)
                return true
            }
            if !queued { globalConcurrentExecutor.enqueue(ExecutorJob(unowned)) }
        } else {
            globalConcurrentExecutor.enqueue(job)
        }
    }

    /// Whether jobs wait for ``runPending()`` (only the reader thread adds them).
    var hasPendingJobs: Bool { queue.withLock { !$0.jobs.isEmpty } }

    func runPending() {
        while true {
            let next: UnownedJob? = queue.withLock { $0.jobs.isEmpty ? nil : $0.jobs.removeFirst() }
            guard let next else { return }
            next.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// At the end of the connection: runs what was read before it ended (a one-way message
    /// followed by GOODBYE is still delivered), and sends any later job to the global executor.
    func retire() {
        runPending()
        let left = queue.withLock { queue -> [UnownedJob] in
            queue.retired = true
            defer { queue.jobs.removeAll() }
            return queue.jobs
        }
        for job in left { globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
    }
}
