import CSandboxSystem
import Glibc
import Synchronization

extension EventMonitor {
    /// A deadline watched by the monitor thread: a one-shot `timerfd` registered like any
    /// descriptor. Unlike a `Task.sleep`, arming and cancelling it wakes no other thread (a
    /// Dispatch timer wakes Dispatch's manager thread for each), so a launch's setup timeout
    /// costs two system calls and nothing else.
    public final class Timer: Sendable {
        /// (Not private: the tests check that cancelling closes it.)
        let descriptor: FileDescriptor
        private let token: UInt64
        private let monitor: EventMonitor
        private let cancelled = Atomic<Bool>(false)

        fileprivate init(descriptor: FileDescriptor, token: UInt64, monitor: EventMonitor) {
            self.descriptor = descriptor
            self.token = token
            self.monitor = monitor
        }

        /// Stops the timer: once this returns its handler is not running and never runs again
        /// (``EventMonitor/remove(fd:token:)``'s promise), and its descriptor is closed. Later
        /// calls do nothing.
        public func cancel() {
            guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
            monitor.remove(fd: descriptor, token: token)
            descriptor.close()
        }

        deinit { cancel() }
    }

    /// Calls `handler` once on the monitor thread `milliseconds` from now (at least 1), unless
    /// the returned timer is cancelled first. The handler must not block, as every handler
    /// here. Throws the failed `timerfd_create`/`timerfd_settime` or `epoll_ctl`.
    public func addTimer(milliseconds: Int, handler: @escaping @Sendable () -> Void) throws(Failure) -> Timer {
        let created = xsb_one_shot_timer(milliseconds)
        guard let descriptor = FileDescriptor(adopting: created) else {
            throw Failure(operation: "timerfd_create", errorNumber: -created)
        }
        let token = try add(fd: descriptor) { _ in
            // Read, it is no longer readable (the watch is level-triggered): the handler runs once.
            var expirations: UInt64 = 0
            guard read(descriptor.rawValue, &expirations, MemoryLayout<UInt64>.size) == MemoryLayout<UInt64>.size else { return }
            handler()
        }
        return Timer(descriptor: descriptor, token: token, monitor: self)
    }
}
