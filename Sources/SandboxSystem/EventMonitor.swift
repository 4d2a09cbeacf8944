import CSandboxSystem
import Dispatch
import Glibc
import Synchronization

/// One thread, one epoll set, for many file descriptors: every sandbox's pidfd (exit) and
/// control socket (messages from its init, violations among them), and the host API's
/// connections and directory watches. No thread per process or per connection, no `wait(-1)`,
/// no SIGCHLD handler.
///
/// Registering borrows the caller's ``FileDescriptor``: the caller keeps owning it and closes
/// it, after ``remove(fd:token:)``. The monitor holds a reference to it until then, so the
/// number it watches cannot be closed by the owner's last reference going (and reused for
/// another file) while it is still registered. The monitor never closes a registered
/// descriptor, only lets go of its reference at the removal; its own epoll instance lives as long
/// as its thread, that is the process.
///
/// Handlers run on the monitor thread, one at a time: they must not block. Once
/// ``remove(fd:token:)`` has returned, the registration's handler is not running and never runs
/// again, so the caller may close the descriptor and free what the handler uses.
public final class EventMonitor: Sendable {
    public typealias Handler = @Sendable (_ events: UInt32) -> Void

    /// A system call of the monitor's that failed: the call and its `errno`.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// The call: `epoll_create1`, `epoll_ctl add`, `pthread_create (xsb-monitor)`.
        public var operation: String
        /// Its `errno`.
        public var errorNumber: Int32

        public init(operation: String, errorNumber: Int32) {
            self.operation = operation
            self.errorNumber = errorNumber
        }

        public var description: String { "\(operation): \(String(cString: strerror(errorNumber))) (errno \(errorNumber))" }
    }

    /// epoll event bits for ``add(fd:events:handler:)`` and ``modify(fd:token:events:)``.
    public static let readable = UInt32(XSB_EPOLLIN)
    public static let writable = UInt32(XSB_EPOLLOUT)
    public static let hangUp = UInt32(XSB_EPOLLHUP)
    public static let error = UInt32(XSB_EPOLLERR)

    /// One registration: its handler, and the descriptor it borrows until removed.
    private struct Registration {
        let handler: Handler
        let descriptor: FileDescriptor
    }

    /// The registrations, and which of them the monitor thread is calling now.
    private struct Registrations {
        /// Room for the first few from the start: making the table's storage the first time
        /// looks up `UInt64`'s `Hashable` conformance in every conformance record of the binary,
        /// which the monitor's start (often off the launching thread) does better than a launch.
        var byToken = [UInt64: Registration](minimumCapacity: 8)
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

    private let epollFD: FileDescriptor
    private let registrations = Mutex(Registrations())
    private let nextToken = Atomic<UInt64>(1)
    /// The monitor thread's `pthread_t` (0 until it has started): ``remove(fd:token:)`` called
    /// from a handler must not wait for itself. (Internal: the tests read its CPU clock.)
    let monitorThread = Atomic<UInt>(0)

    /// A monitor with its own thread (`xsb-monitor`), which runs for the life of the process.
    /// Throws the failed `epoll_create1` or `pthread_create`.
    public init() throws(Failure) {
        let created = xsb_epoll_create()
        guard let epollFD = FileDescriptor(adopting: created) else {
            throw Failure(operation: "epoll_create1", errorNumber: -created)
        }
        self.epollFD = epollFD
        do {
            try DetachedThread.start(name: "xsb-monitor") { [self] in self.loop() }
        } catch {
            throw Failure(operation: "pthread_create (xsb-monitor)", errorNumber: error.code)
        }
    }

    /// Watches `fd` (level-triggered) and calls `handler` on the monitor thread. Borrows `fd`
    /// until ``remove(fd:token:)``: the caller still owns it and closes it after the removal.
    /// Returns the token for ``modify(fd:token:events:)`` and ``remove(fd:token:)``; throws the
    /// failed `epoll_ctl` (operation `epoll_ctl add`, its `errno`).
    @discardableResult
    public func add(fd: FileDescriptor, events: UInt32 = EventMonitor.readable, handler: @escaping Handler) throws(Failure) -> UInt64 {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        registrations.withLock { $0.byToken[token] = Registration(handler: handler, descriptor: fd) }
        let rc = xsb_epoll_add(epollFD.rawValue, fd.rawValue, events, token)
        if rc != 0 {
            registrations.withLock { _ = $0.byToken.removeValue(forKey: token) }
            throw Failure(operation: "epoll_ctl add", errorNumber: -rc)
        }
        return token
    }

    /// Changes the events watched for a registration (for example to wait for writability).
    public func modify(fd: FileDescriptor, token: UInt64, events: UInt32) {
        _ = xsb_epoll_modify(epollFD.rawValue, fd.rawValue, events, token)
    }

    /// Stops watching `fd` at once, without waiting for its handler: its registration stays
    /// until ``remove(fd:token:)``. For a descriptor about to be closed whose peer will hang up
    /// first: the hang-up then wakes no monitor thread for nothing.
    public func stopWatching(fd: FileDescriptor) {
        _ = xsb_epoll_remove(epollFD.rawValue, fd.rawValue)
    }

    /// Stops watching `fd` and gives it back: call before closing it. When the registration's
    /// handler is running on the monitor thread, waits until it has returned (so that the
    /// caller may close `fd` and free the handler's state right after), unless called from the
    /// monitor thread itself (from a handler: waiting there would never end). So never call it
    /// while holding a lock that the registration's handler takes.
    public func remove(fd: FileDescriptor, token: UInt64) {
        _ = xsb_epoll_remove(epollFD.rawValue, fd.rawValue)
        let onMonitorThread = pthread_equal(pthread_self(), monitorThread.load(ordering: .relaxed)) != 0
        let (handlerReturned, removed): (DispatchSemaphore?, Registration?) = registrations.withLock { registrations in
            let removed = registrations.byToken.removeValue(forKey: token)
            guard registrations.running == token, !onMonitorThread else { return (nil, removed) }
            let waiter = DispatchSemaphore(value: 0)
            registrations.waiters.append(waiter)
            return (waiter, removed)
        }
        handlerReturned?.wait()
        // The handler and the borrowed descriptor are let go after the lock: the handler may
        // hold the last reference to what owns the descriptor, whose end may call the monitor.
        withExtendedLifetime(removed) {}
    }

    private func loop() -> Never {
        monitorThread.store(UInt(pthread_self()), ordering: .relaxed)
        let batch = Int(XSB_EPOLL_MAX_EVENTS)
        var tokens = [UInt64](repeating: 0, count: batch)
        var events = [UInt32](repeating: 0, count: batch)
        while true {
            let count = xsb_epoll_wait(epollFD.rawValue, &tokens, &events, Int32(batch), -1)
            guard count > 0 else { continue }
            for index in 0..<Int(count) {
                let token = tokens[index]
                // One lock per event: it ends the previous handler's turn and starts this one's.
                // A handler earlier in this batch may have removed this registration.
                let handler = registrations.withLock { registrations -> Handler? in
                    registrations.finishRunning()
                    guard let registration = registrations.byToken[token] else { return nil }
                    registrations.running = token
                    return registration.handler
                }
                handler?(events[index])
            }
            registrations.withLock { $0.finishRunning() }
        }
    }
}
