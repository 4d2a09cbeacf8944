import ExtSandboxWire
import Foundation
import Glibc
import Testing
import TestSupport

/// `UntrustedDescriptors.close` never waits for what a peer made blocking: a TCP socket whose
/// last close lingers (a full send buffer, a peer that never reads, `SO_LINGER` 120 s), given
/// directly, queued in a Unix socket, or queued in a connection a Unix listener has not accepted.
@Suite("Closing untrusted descriptors")
struct UntrustedDescriptorsTests {
    @Test("a lingering socket, directly or queued in a Unix socket or an unaccepted connection: closed at once", .oneExitTestAtATime,
          arguments: ["direct", "queued", "unaccepted"])
    func lingeringSocket(where place: String) async {
        // In a process of its own (an exit test): a close that blocks would hold a closing thread
        // of this process for two minutes.
        await #expect(processExitsWith: .success) { [place] in
            Thread.detachNewThread {
                sleep(30)
                FileHandle.standardError.write(Data("\(place): not closed after 30 s\n".utf8))
                _exit(3)
            }
            let (lingering, listener) = Self.lingeringSocket()
            var given: [Int32] = []
            switch place {
            case "direct":
                given = [lingering]
            case "queued":
                var pair: [Int32] = [-1, -1]
                guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0 else { exit(2) }
                rawSend(pair[1], [1], fds: [lingering])
                close(lingering)
                close(pair[1])
                given = [pair[0]]
            default:
                let path = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-\(UUID().uuidString).sock").path
                let unixListener = Self.unixSocket()
                let connecting = Self.unixSocket()
                guard Self.withAddress(path, { bind(unixListener, $0, $1) }) == 0, listen(unixListener, 4) == 0,
                      Self.withAddress(path, { connect(connecting, $0, $1) }) == 0 else { exit(2) }
                unlink(path)
                rawSend(connecting, [1], fds: [lingering])
                close(lingering)
                close(connecting)
                given = [unixListener]
            }
            let started = ContinuousClock.now
            UntrustedDescriptors.close(given)
            if ContinuousClock.now - started > .seconds(1) { exit(4) }
            UntrustedDescriptors.waitUntilClosed()
            if given.contains(where: { fcntl($0, F_GETFD) >= 0 }) { exit(5) }
            close(listener)
            exit(0)
        }
    }

    /// A TCP socket on the loopback whose last close waits up to 120 s, and its listener (never
    /// accepting; closing it would reset the connection).
    static func lingeringSocket() -> (socket: Int32, listener: Int32) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, size) == 0 && listen(listener, 1) == 0 && getsockname(listener, $0, &size) == 0
            }
        }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, size) == 0 }
        }
        precondition(bound && connected, "loopback TCP: errno \(errno)")
        _ = fcntl(client, F_SETFL, O_NONBLOCK)
        let chunk = [UInt8](repeating: 1, count: 1 << 16)
        while chunk.withUnsafeBytes({ send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) > 0 {}
        var lingering = linger(l_onoff: 1, l_linger: 120)
        precondition(setsockopt(client, SOL_SOCKET, SO_LINGER, &lingering, socklen_t(MemoryLayout<linger>.size)) == 0)
        return (client, listener)
    }

    static func unixSocket() -> Int32 { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0) }

    /// Calls `body` with `path` as a `sockaddr_un`.
    static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
        }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }
}
