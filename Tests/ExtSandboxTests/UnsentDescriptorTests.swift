import ExtSandbox
import ExtSandboxWire
import Foundation
import Glibc
import SandboxRuntime
import Testing
import TestSupport

/// A message that never reaches the extension (a request cancelled while it waits in the send
/// queue, or a message still queued when the connection closes) takes only the host's copies of
/// the caller's descriptors with it: the caller's socket pair still carries bytes both ways, and
/// its options are the ones the caller set.
@Suite("The caller's descriptors in a message that is never sent")
struct UnsentDescriptorTests {
    /// The linger setting the caller gives the socket it sends.
    static let callersLinger = linger(l_onoff: 1, l_linger: 7)

    /// A connected Unix socket pair, close-on-exec; `sent` (the second) has ``callersLinger``.
    struct Pair {
        let kept: FileDescriptor
        let sent: FileDescriptor

        init() throws {
            var fds: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
            kept = try #require(FileDescriptor(adopting: fds[0]))
            sent = try #require(FileDescriptor(adopting: fds[1]))
            var setting = UnsentDescriptorTests.callersLinger
            try #require(setsockopt(sent.rawValue, SOL_SOCKET, SO_LINGER, &setting, socklen_t(MemoryLayout<linger>.size)) == 0)
        }

        /// How many of this process's descriptors refer to the socket of `sent` (its copies count).
        var referencesToSent: Int {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(sent.rawValue)") else { return 0 }
            let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return names.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == target }.count
        }

        /// What goes wrong when bytes go from `from` to `to`, or nil when they arrive.
        static func carry(_ text: String, from: FileDescriptor, to: FileDescriptor) -> String? {
            let bytes = Array(text.utf8)
            let written = bytes.withUnsafeBytes { send(from.rawValue, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            guard written == bytes.count else { return "send on \(from.rawValue): \(written) (errno \(errno))" }
            var buffer = [UInt8](repeating: 0, count: 64)
            let read = buffer.withUnsafeMutableBytes { recv(to.rawValue, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard read == bytes.count, Array(buffer.prefix(read)) == bytes else { return "recv on \(to.rawValue): \(read) (errno \(errno))" }
            return nil
        }

        /// Checks that the pair is as the caller left it.
        func expectIntact() {
            #expect(Self.carry("to the sent end", from: kept, to: sent) == nil)
            #expect(Self.carry("from the sent end", from: sent, to: kept) == nil)
            var setting = linger()
            var size = socklen_t(MemoryLayout<linger>.size)
            #expect(getsockopt(sent.rawValue, SOL_SOCKET, SO_LINGER, &setting, &size) == 0)
            #expect(setting.l_onoff == UnsentDescriptorTests.callersLinger.l_onoff
                && setting.l_linger == UnsentDescriptorTests.callersLinger.l_linger)
        }
    }

    /// A connection to an extension that never reads, with a one-way message of 2 MiB partly
    /// written at the head of its send queue (more than the socket's buffers take): whatever is
    /// sent next waits in the queue, not a byte of it written.
    static func stalledConnection() async throws -> (AppExtensionProcess, ExtensionConnection) {
        let process = try await AppExtensionProcess(configuration: .init(identity: ChannelTests.pythonIdentity("no-read")))
        let connection = try await process.makeConnection()
        try connection.sendOneWay(ExtensionMessage([UInt8](repeating: 7, count: 2 << 20)))
        return (process, connection)
    }

    @Test("a request cancelled while queued leaves the caller's socket pair working, its SO_LINGER unchanged")
    func cancelledRequest() async throws {
        let (process, connection) = try await Self.stalledConnection()
        defer { process.invalidate() }
        defer { connection.invalidate() }
        let pair = try Pair()
        let request = Task { try await connection.send(ExtensionMessage(Array("with a socket".utf8), fileDescriptors: [pair.sent])) }
        // Queued once the host holds its copy of the socket.
        #expect(await HostFixtures.eventually { pair.referencesToSent == 2 })
        request.cancel()
        do {
            _ = try await request.value
            Issue.record("a request to an extension that never reads was answered")
        } catch ExtensionError.cancelled {
        }
        UntrustedDescriptors.waitUntilClosed()
        #expect(await HostFixtures.eventually { pair.referencesToSent == 1 })
        #expect(connection.isOpen)
        pair.expectIntact()
    }

    @Test("a message still queued when the connection closes leaves the caller's socket pair working, its SO_LINGER unchanged")
    func queuedAtClose() async throws {
        let (process, connection) = try await Self.stalledConnection()
        defer { process.invalidate() }
        let pair = try Pair()
        try connection.sendOneWay(ExtensionMessage(Array("with a socket".utf8), fileDescriptors: [pair.sent]))
        #expect(pair.referencesToSent == 2)
        connection.invalidate()
        UntrustedDescriptors.waitUntilClosed()
        #expect(await HostFixtures.eventually { pair.referencesToSent == 1 })
        pair.expectIntact()
    }
}
