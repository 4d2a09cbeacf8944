import CSupervisorSupport
import Dispatch
import Glibc
import Synchronization

/// One thread, one epoll set, for many file descriptors: every sandbox's pidfd (exit) and
/// control socket (messages from its init, violations among them), and the host API's
/// connections. No thread per process or per connection, no `wait(-1)`, no SIGCHLD handler.
///
/// Handlers run on the monitor thread, one at a time: they must not block. Once
/// ``remove(fd:token:)`` has returned, the registration's handler is not running and never runs
/// again, so the caller may close the fd and free what the handler uses.
public final class EventMonitor: Sendable {
    public typealias Handler = @Sendable (_ events: UInt32) -> Void

    /// epoll event bits for ``add(fd:events:handler:)`` and ``modify(fd:token:events:)``.
    public static let readable = UInt32(XSB_EPOLLIN)
    public static let writable = UInt32(XSB_EPOLLOUT)
    public static let hangUp = UInt32(XSB_EPOLLHUP)
    public static let error = UInt32(XSB_EPOLLERR)

    /// The registrations, and which of them the monitor thread is calling now.
    private struct Registrations {
        var handlers: [UInt64: Handler] = [:]
        /// The token whose handler runs on the monitor thread now, if any.
        var running: UInt64?
        /// Threads in ``remove(fd:token:)`` waiting for the running handler to return.
        var waiters: [DispatchSemaphore] = []

        /// The monitor thread is done with the running handler: wakes who waits for it.
        mutating func finishRunning() {
            running = nil
            for waiter in waiters { waiter.signal() }
            waiters.removeAll()
        }
    }

    private let epollFD: Int32
    private let registrations = Mutex(Registrations())
    private let nextToken = Atomic<UInt64>(1)
    /// The monitor thread's `pthread_t` (0 until it has started): ``remove(fd:token:)`` called
    /// from a handler must not wait for itself.
    private let monitorThread = Atomic<UInt>(0)

    public init() throws {
        epollFD = xsb_epoll_create()
        guard epollFD >= 0 else { throw SandboxError(step: .control, errorNumber: -epollFD, detail: "epoll_create1") }
        do {
            try SupervisorThread.start(name: "xsb-monitor") { [self] in self.loop() }
        } catch {
            close(epollFD)
            throw error
        }
    }

    /// Watches `fd` (level-triggered) and calls `handler` on the monitor thread. Returns the
    /// token for ``remove(fd:token:)``; throws the failed `epoll_ctl` (step ``SandboxError/Step/control``,
    /// its `errno`).
    @discardableResult
    public func add(fd: Int32, events: UInt32 = UInt32(XSB_EPOLLIN), handler: @escaping Handler) throws(SandboxError) -> UInt64 {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        registrations.withLock { $0.handlers[token] = handler }
        let rc = xsb_epoll_add(epollFD, fd, events, token)
        if rc != 0 {
            registrations.withLock { _ = $0.handlers.removeValue(forKey: token) }
            throw SandboxError(step: .control, errorNumber: -rc, detail: "epoll_ctl add")
        }
        return token
    }

    /// Changes the events watched for a registration (for example to wait for writability).
    public func modify(fd: Int32, token: UInt64, events: UInt32) {
        _ = xsb_epoll_modify(epollFD, fd, events, token)
    }

    /// Stops watching; call before closing `fd`. When the registration's handler is running on
    /// the monitor thread, waits until it has returned (so that the caller may close `fd` and
    /// free the handler's state right after), unless called from the monitor thread itself (from
    /// a handler: waiting there would never end). So never call it while holding a lock that
    /// the registration's handler takes.
    public func remove(fd: Int32, token: UInt64) {
        _ = xsb_epoll_remove(epollFD, fd)
        let onMonitorThread = pthread_equal(pthread_self(), monitorThread.load(ordering: .relaxed)) != 0
        let handlerReturned: DispatchSemaphore? = registrations.withLock { registrations in
            _ = registrations.handlers.removeValue(forKey: token)
            guard registrations.running == token, !onMonitorThread else { return nil }
            let waiter = DispatchSemaphore(value: 0)
            registrations.waiters.append(waiter)
            return waiter
        }
        handlerReturned?.wait()
    }

    private func loop() -> Never {
        monitorThread.store(UInt(pthread_self()), ordering: .relaxed)
        let batch = Int(XSB_EPOLL_MAX_EVENTS)
        var tokens = [UInt64](repeating: 0, count: batch)
        var events = [UInt32](repeating: 0, count: batch)
        while true {
            let count = xsb_epoll_wait(epollFD, &tokens, &events, Int32(batch), -1)
            guard count > 0 else { continue }
            for index in 0..<Int(count) {
                let token = tokens[index]
                // One lock per event: it ends the previous handler's turn and starts this one's.
                // A handler earlier in this batch may have removed this registration.
                let handler = registrations.withLock { registrations -> Handler? in
                    registrations.finishRunning()
                    guard let handler = registrations.handlers[token] else { return nil }
                    registrations.running = token
                    return handler
                }
                handler?(events[index])
            }
            registrations.withLock { $0.finishRunning() }
        }
    }
}
