import Foundation
import Synchronization
import Testing

/// A task executor with threads of its own, outside the cooperative pool.
///
/// A synchronous test runs on the pool thread that starts it, and holds it to its end: one that
/// compiles seccomp filters for half a minute (a debug build), waits for a process or reads a
/// socket keeps every other test's tasks (and a launch's, which must see READY or an exit within
/// bounds) from one of the pool's two threads in CI. (An exit test's wait is Swift Testing's own
/// and stays on the pool whatever the preference: see ``ExitTestTurnsTrait``.) Run with this
/// executor as their preference (see ``DedicatedThreadsTrait``), such tests block a thread of
/// their own instead, and the kernel shares the CPU between them and the pool.
public final class DedicatedThreads: TaskExecutor {
    /// The one instance: enough threads for the test cases that run at once (Swift Testing runs
    /// at most twice the core count in parallel) plus what they start.
    public static let shared = DedicatedThreads(count: 8)

    private let jobs = Mutex<[UnownedJob]>([])
    private let available = DispatchSemaphore(value: 0)

    private init(count: Int) {
        for index in 0..<count {
            startThread(name: "test-thread-\(index)", stackSize: 8 << 20 /* as a pool thread's */) { [self] in work() }
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.append(job) }
        available.signal()
    }

    /// Runs jobs for the life of the test process (a job may be enqueued at any time, even
    /// after the test that made its task has ended).
    private func work() {
        while true {
            available.wait()
            guard let job = jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { continue }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Runs each test case of a test or suite with ``DedicatedThreads`` as its task executor
/// preference, so that what it blocks or keeps busy is a thread of its own, not the cooperative
/// pool's (see ``DedicatedThreads``). For synchronous tests that take long (CPU, blocking I/O);
/// tasks the test creates inherit the preference.
public struct DedicatedThreadsTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(DedicatedThreads.shared) { try await function() }
    }
}

extension Trait where Self == DedicatedThreadsTrait {
    /// Each test case runs on a thread of its own, off the cooperative pool (see ``DedicatedThreads``).
    public static var offThePool: Self { Self() }
}
