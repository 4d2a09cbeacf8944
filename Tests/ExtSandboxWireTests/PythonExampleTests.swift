import Foundation
import Glibc
import SandboxSystem
import Testing
@testable import ExtSandboxWire
import TestSupport

/// Drives Examples/python-echo/extension.py as the host would: the protocol implemented from the
/// document alone, in another language.
@Suite("Python example extension", .enabled(if: pythonAvailable), .offThePool)
struct PythonExampleTests {
    /// A running extension.py with fd 3 = one end of a socketpair.
    final class Extension {
        let pid: pid_t
        let control: FrameSocket

        init() throws {
            let (host, child) = try FrameSocket.makeSocketPair()
            // Move the child's end out of the way of fd 3 (dup2 onto itself would keep CLOEXEC).
            let high = fcntl(child.rawValue, F_DUPFD_CLOEXEC, 64)
            child.close()
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, high, 3)
            let script = repositoryRoot + "/Examples/python-echo/extension.py"
            let argv: [UnsafeMutablePointer<CChar>?] = [strdup("python3"), strdup(script), nil]
            defer { argv.forEach { free($0) } }
            var pid: pid_t = 0
            let status = posix_spawnp(&pid, "python3", &actions, nil, argv, environ)
            close(high)
            guard status == 0 else { throw WireError.systemCall("posix_spawnp", errno: status) }
            self.pid = pid
            control = FrameSocket(descriptor: host)
        }

        /// Sends CONNECT with a new socketpair end; returns the host's end.
        func connect(id: UInt64) throws -> FrameSocket {
            let (host, ext) = try FrameSocket.makeSocketPair()
            try control.send(.connect(id: id, descriptor: ext))
            ext.close()
            return FrameSocket(descriptor: host)
        }

        /// Waits for the process; returns its wait status.
        func wait() -> Int32 {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            return status
        }

        deinit {
            if kill(pid, 0) == 0 {
                kill(pid, SIGKILL)
                _ = wait()
            }
        }
    }

    /// HELLO as the host, returning the extension's answer.
    func handshake(_ connection: FrameSocket, name: String) throws -> Frame {
        try connection.send(.hello(Hello(name: name)))
        return try #require(try connection.receive())
    }

    @Test("READY, CONNECT, HELLO, requests, memfd, ONEWAY, CANCEL, rejection, GOODBYE")
    func conversation() throws {
        let ext = try Extension()
        let ready = try #require(try ext.control.receive())
        #expect(ready.kind == .ready)
        #expect(String(decoding: ready.payload, as: UTF8.self) == "com.example.python-echo")

        // Connection 1: handshake accepted.
        let connection = try ext.connect(id: 1)
        let hello = try handshake(connection, name: "test-host").hello()
        try hello.checkVersion()
        #expect(hello.name == "com.example.python-echo")
        connection.encoder.maximumFrameSize = hello.maximumFrameSize

        // Echo, small and large (1 MiB: partial writes on both sides).
        try connection.send(.request(id: 1, payload: Array("hello, world".utf8)))
        #expect(try connection.receive() == .reply(id: 1, payload: Array("hello, world".utf8)))
        let big = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 * 7) }
        try connection.send(.request(id: 2, payload: big))
        #expect(try connection.receive() == .reply(id: 2, payload: big))

        // A memfd: the extension replies with its size.
        let memfd = makeMemfd(size: 54_321)
        try connection.send(.request(id: 3, payload: Array("memfd:size".utf8), fds: [borrowed(memfd)]))
        close(memfd)
        #expect(try connection.receive() == .reply(id: 3, payload: Array("54321".utf8)))

        // One-way messages are counted.
        for index in 0..<3 { try connection.send(.oneway(payload: [UInt8(index)])) }
        try connection.send(.request(id: 4, payload: Array("count".utf8)))
        #expect(try connection.receive() == .reply(id: 4, payload: Array("3".utf8)))

        // CANCEL: a held request is answered with ERROR cancelled; CANCEL of an answered one is ignored.
        try connection.send(.request(id: 5, payload: Array("hold:".utf8)))
        try connection.send(.cancel(id: 1))
        try connection.send(.cancel(id: 5))
        let cancelled = try #require(try connection.receive())
        #expect(cancelled.kind == .error && cancelled.id == 5)
        #expect(try cancelled.errorPayload().code == .cancelled)

        // An application-defined error.
        try connection.send(.request(id: 6, payload: Array("fail:no luck".utf8)))
        let failed = try #require(try connection.receive())
        #expect(try failed.errorPayload() == ErrorPayload(code: .application(0), message: "no luck"))

        // A rejected connection: ERROR 1 with id 0, then the extension closes it.
        let rejected = try ext.connect(id: 2)
        let refusal = try handshake(rejected, name: "reject-me")
        #expect(refusal.kind == .error && refusal.id == 0)
        #expect(try refusal.errorPayload().code == .rejected)
        #expect(try rejected.receive() == nil)

        // A wrong version: ERROR 4, then closed.
        let oldVersion = try ext.connect(id: 3)
        try oldVersion.send(.hello(Hello(version: 2)))
        let versionError = try #require(try oldVersion.receive())
        #expect(try versionError.errorPayload().code == .protocolError)
        #expect(try oldVersion.receive() == nil)

        // A malformed frame from the host: the extension answers ERROR 4 and closes; others carry on.
        let garbage = try ext.connect(id: 4)
        _ = try handshake(garbage, name: "garbage")
        rawSend(garbage.descriptor!.rawValue, rawFrame(kind: 77, id: 1))
        let protocolError = try #require(try garbage.receive())
        #expect(try protocolError.errorPayload().code == .protocolError)
        #expect(try garbage.receive() == nil)
        try connection.send(.request(id: 7, payload: [1]))
        #expect(try connection.receive() == .reply(id: 7, payload: [1]))

        // GOODBYE: the extension closes the connection.
        try connection.send(.goodbye)
        #expect(try connection.receive() == nil)

        // GOODBYE on the control socket: the extension acknowledges and exits 0.
        try ext.control.send(.goodbye)
        #expect(try ext.control.receive() == .goodbye)
        #expect(try ext.control.receive() == nil)
        let status = ext.wait()
        #expect(status & 0x7f == 0 && (status >> 8) & 0xff == 0, "exit status \(status)")
    }

    /// The host side of a misbehaving extension (played in Swift): each reaches the host as the
    /// right ``WireError``.
    @Test("a misbehaving extension's frames reach the host as typed errors")
    func misbehavingExtension() throws {
        let cases: [([UInt8], [Int32], WireError)] = [
            (rawFrame(kind: 3, id: 1, payload: [1]) + rawHeader(length: 0xFFFF_FFFF, kind: 3, id: 2), [],
             .frameTooLarge(length: 0xFFFF_FFFF, maximum: ExtSandboxWire.defaultMaximumFrameSize)),
            (rawFrame(kind: 10), [], .unknownKind(10)),
            (rawFrame(kind: 9, fdCount: 1), [makeMemfd(size: 1)], .invalidFDCount(kind: .ready, count: 1, allowed: 0...0)),
            (Array(rawFrame(kind: 1, payload: Hello().payload).dropLast()), [], .truncatedFrame(received: 25, expected: 26)),
        ]
        for (bytes, fds, expected) in cases {
            let (host, ext) = try FrameSocket.makeSocketPair()
            rawSend(ext.rawValue, bytes, fds: fds)
            fds.forEach { close($0) }
            ext.close()
            let socket = FrameSocket(descriptor: host)
            var frames: [Frame] = []
            do {
                while let frame = try socket.receive() { frames.append(frame) }
                Issue.record("no error for \(expected)")
            } catch {
                #expect(error == expected)
                #expect(!"\(error)".isEmpty)
            }
            frames.forEach { $0.closeFDs() }
        }
    }
}

let pythonAvailable: Bool = {
    let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":")
    return paths.contains { access("\($0)/python3", X_OK) == 0 }
}()
