import CSandboxShim
import Glibc
import Synchronization

/// One thread, one epoll set, for many file descriptors: every sandbox's pidfd (exit) and
/// control socket (messages from its init, violations among them), and the host API's
/// connections. No thread per process or per connection, no `wait(-1)`, no SIGCHLD handler.
///
/// Handlers run on the monitor thread, one at a time: they must not block.
public final class EventMonitor: Sendable {
    public typealias Handler = @Sendable (_ events: UInt32) -> Void

    /// epoll event bits for ``add(fd:events:handler:)`` and ``modify(fd:token:events:)``.
    public static let readable = UInt32(XSB_EPOLLIN)
    public static let writable = UInt32(XSB_EPOLLOUT)
    public static let hangUp = UInt32(XSB_EPOLLHUP)
    public static let error = UInt32(XSB_EPOLLERR)

    private let epollFD: Int32
    private let handlers = Mutex<[UInt64: Handler]>([:])
    private let nextToken = Atomic<UInt64>(1)

    public init() throws {
        epollFD = xsb_epoll_create()
        guard epollFD >= 0 else { throw SandboxError(step: .control, errorNumber: -epollFD, detail: "epoll_create1") }
        do {
            try DetachedThread.start(name: "xsb-monitor") { [self] in self.loop() }
        } catch {
            close(epollFD)
            throw error
        }
    }

    /// Watches `fd` (level-triggered) and calls `handler` on the monitor thread. Returns the
    /// token for ``remove(fd:token:)``.
    @discardableResult
    public func add(fd: Int32, events: UInt32 = UInt32(XSB_EPOLLIN), handler: @escaping Handler) throws -> UInt64 {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        handlers.withLock { $0[token] = handler }
        let rc = xsb_epoll_add(epollFD, fd, events, token)
        if rc != 0 {
            handlers.withLock { _ = $0.removeValue(forKey: token) }
            throw SandboxError(step: .control, errorNumber: -rc, detail: "epoll_ctl add")
        }
        return token
    }

    /// Changes the events watched for a registration (for example to wait for writability).
    public func modify(fd: Int32, token: UInt64, events: UInt32) {
        _ = xsb_epoll_modify(epollFD, fd, events, token)
    }

    /// Stops watching; call before closing `fd`.
    public func remove(fd: Int32, token: UInt64) {
        _ = xsb_epoll_remove(epollFD, fd)
        handlers.withLock { _ = $0.removeValue(forKey: token) }
    }

    private func loop() -> Never {
        var tokens = [UInt64](repeating: 0, count: 64)
        var events = [UInt32](repeating: 0, count: 64)
        while true {
            let count = xsb_epoll_wait(epollFD, &tokens, &events, 64, -1)
            guard count > 0 else { continue }
            for index in 0..<Int(count) {
                let token = tokens[index]
                // A handler earlier in this batch may have removed this registration.
                if let handler = handlers.withLock({ $0[token] }) { handler(events[index]) }
            }
        }
    }
}
