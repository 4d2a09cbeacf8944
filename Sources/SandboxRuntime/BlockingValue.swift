import Glibc

/// A value set once by one thread and waited for, blocking, by another. A POSIX semaphore, not
/// Swift concurrency or Dispatch: the setter may be the spawner thread, which must touch neither,
/// and the waiter a one-shot command's main thread, which then wakes with no other thread's help.
/// `@unchecked`: the value is written once, before the semaphore's post, and read after the wait.
final class BlockingValue<Value: Sendable>: @unchecked Sendable {
    private var value: Value?
    /// A semaphore needs a stable address.
    private let done: UnsafeMutablePointer<sem_t> = .allocate(capacity: 1)

    init() { sem_init(done, 0, 0) }
    deinit {
        sem_destroy(done)
        done.deallocate()
    }

    /// Sets the value and wakes the waiter: call once.
    func set(_ value: Value) {
        self.value = value
        sem_post(done)
    }

    /// Blocks until ``set(_:)``; its value.
    func wait() -> Value {
        while sem_wait(done) != 0 {}  // EINTR
        guard let value else { preconditionFailure("woken without a value") }
        return value
    }
}
