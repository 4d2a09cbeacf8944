import CSandboxShim
import Foundation
import Glibc
import Synchronization

/// One thread, one epoll set, for every sandbox: pidfds (exit), control sockets (messages
/// from each sandbox's init) and seccomp listeners (violations). No thread per process, no
/// `wait(-1)`, no SIGCHLD handler.
final class ProcessMonitor: Sendable {
    typealias Handler = @Sendable (_ events: UInt32) -> Void

    private let epollFD: Int32
    private let handlers = Mutex<[UInt64: Handler]>([:])
    private let nextToken = Atomic<UInt64>(1)

    init() throws {
        epollFD = xsb_epoll_create()
        guard epollFD >= 0 else { throw SandboxError(step: .control, errorNumber: -epollFD, detail: "epoll_create1") }
        let thread = Thread { [self] in self.loop() }
        thread.name = "xsb-monitor"
        thread.start()
    }

    /// Watches `fd` (level-triggered) and calls `handler` on the monitor thread. Returns the
    /// token for ``remove(fd:token:)``.
    @discardableResult
    func add(fd: Int32, events: UInt32 = UInt32(XSB_EPOLLIN), handler: @escaping Handler) throws -> UInt64 {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        handlers.withLock { $0[token] = handler }
        let rc = xsb_epoll_add(epollFD, fd, events, token)
        if rc != 0 {
            handlers.withLock { _ = $0.removeValue(forKey: token) }
            throw SandboxError(step: .control, errorNumber: -rc, detail: "epoll_ctl add")
        }
        return token
    }

    /// Stops watching; call before closing `fd`.
    func remove(fd: Int32, token: UInt64) {
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
