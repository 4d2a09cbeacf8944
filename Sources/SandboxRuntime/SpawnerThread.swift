import Foundation

/// The one long-lived thread that clones every sandbox.
///
/// PR_SET_PDEATHSIG fires when the parent *thread* exits, not the process; Swift's
/// concurrency and Dispatch threads come and go, so a sandbox cloned from one of them could be
/// killed at a random moment. Cloning from a thread that never exits ties each sandbox's
/// lifetime to the supervisor process instead.
final class SpawnerThread: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []

    init() {
        let thread = Thread { [self] in self.loop() }
        thread.name = "xsb-spawner"  // at most 15 bytes, or Linux ignores it
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Runs `body` on the spawner thread and returns its result.
    func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            condition.lock()
            jobs.append { continuation.resume(returning: body()) }
            condition.signal()
            condition.unlock()
        }
    }

    private func loop() -> Never {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
        }
    }
}
