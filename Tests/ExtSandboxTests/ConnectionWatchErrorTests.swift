import Glibc
import SandboxRuntime
import SandboxSystem
import Testing
@testable import ExtSandbox
import ExtSandboxWire

/// Issue 12's typed errors: a connection whose socket the host's event monitor cannot watch
/// closes with the runtime's typed cause (``ExtensionError/monitorFailed(_:)``, a
/// ``SandboxError`` with the `errno` of `epoll_ctl`), not a sentence in ``ExtensionError/connectionClosed(detail:)``.
@Suite("A connection's monitor registration failure")
struct ConnectionWatchErrorTests {
    @Test("the handshake fails with the event monitor's SandboxError (EEXIST) kept, and the socket is closed")
    func registrationFailureKeepsTheSandboxError() async throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        let (hostEnd, extensionEnd) = (pair[0], pair[1])
        defer { close(extensionEnd) }
        // A monitor of this test's own, on which the host's end is registered already: the
        // connection's own registration of it then fails (EEXIST), as a real one fails for lack
        // of memory or epoll watches.
        let monitor = try EventMonitor()
        // The connection owns (and closes) the host's end; this test's registration borrows it.
        let hostDescriptor = try #require(FileDescriptor(adopting: hostEnd))
        let earlier = try monitor.add(fd: hostDescriptor, events: EventMonitor.readable) { _ in }
        defer { monitor.remove(fd: hostDescriptor, token: earlier) }
        let connection = ExtensionConnection(descriptor: hostDescriptor, monitor: monitor, name: "host", onClose: {})
        do {
            try await connection.handshake(timeout: .seconds(30))
            Issue.record("the handshake succeeded on a socket the monitor did not watch")
        } catch let failure {
            let cause = failure.underlying as? SandboxError
            #expect(cause?.step == .control, "\(failure)")
            #expect(cause?.errorNumber == EEXIST, "\(failure)")
            #expect(cause?.detail == "epoll_ctl add", "\(failure)")
            #expect("\(failure)".hasPrefix("the host cannot watch the connection: "), "\(failure)")
        }
        #expect(!connection.isOpen)
        // The host's end is closed: the extension's end reads end of file once the HELLO is read.
        var limit = timeval(tv_sec: 10, tv_usec: 0)  // never hang: a socket left open fails the test
        #expect(setsockopt(extensionEnd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size)) == 0)
        var buffer = [UInt8](repeating: 0, count: 4096)
        var total = 0
        while true {
            let count = read(extensionEnd, &buffer, buffer.count)
            guard count > 0 else {
                #expect(count == 0, "errno \(errno)")
                break
            }
            total += count
        }
        #expect(total > 0, "the HELLO was sent before the registration")
    }
}
