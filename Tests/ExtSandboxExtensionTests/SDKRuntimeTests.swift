import ExtSandboxWire
import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import Synchronization
import Testing
import TestSupport

/// The SDK's runtime (`ExtensionRuntime`) driven over the wire by a host written here, in ways the
/// host API never does: a HELLO sent only after the CONNECT, many CONNECTs back to back, and
/// connections opened and closed one after another (its threads take turns at the control
/// socket and are kept for later connections).
@Suite("SDK runtime over the wire")
struct SDKRuntimeTests {
    /// The echo fixture in a standard sandbox, with its control socket.
    final class Echo: @unchecked Sendable {
        let control: FrameSocket
        let sandbox: SandboxedProcess
        private var nextConnection: UInt64 = 1

        init() async throws {
            let policy = try PolicyLoader.load(file: TestPaths.standardPolicyPath)
            let (host, ext) = try FrameSocket.makeSocketPair()
            let executable = TestPaths.echoExtension
            let sandbox = try await Supervisor.shared.launch(SandboxConfiguration(
                executable: executable, environment: SandboxEnvironment.compose(policy: policy, caller: [:]),
                policy: policy, standardInput: .null, extraFileDescriptors: [ext]))
            ext.close()
            self.sandbox = sandbox
            control = FrameSocket(descriptor: host)
            let ready = try #require(try control.receive())
            #expect(ready.kind == .ready)
        }

        deinit {
            sandbox.kill()
        }

        /// Hands the extension a new connection; `helloFirst` writes the HELLO before the CONNECT
        /// (as the host API does), else after it.
        func connect(helloFirst: Bool, delay: Duration = .zero) throws -> FrameSocket {
            let (host, ext) = try FrameSocket.makeSocketPair()
            let socket = FrameSocket(descriptor: host)
            if helloFirst { try socket.send(.hello(Hello(name: "test"))) }
            try control.send(.connect(id: nextConnection, descriptor: ext))
            ext.close()
            nextConnection += 1
            if !helloFirst {
                if delay > .zero { usleep(UInt32(delay.components.attoseconds / 1_000_000_000_000)) }
                try socket.send(.hello(Hello(name: "test")))
            }
            return socket
        }

        static func handshakeAndEcho(_ socket: FrameSocket, _ text: String) throws -> Bool {
            guard let hello = try socket.receive(), hello.kind == .hello else { return false }
            try socket.send(.request(id: 1, payload: Array(text.utf8)))
            guard let reply = try socket.receive(), reply.kind == .reply, reply.id == 1 else { return false }
            return String(decoding: reply.payload, as: UTF8.self) == text
        }
    }

    @Test("a HELLO that comes after the CONNECT is still answered")
    func lateHello() async throws {
        let echo = try await Echo()
        let socket = try echo.connect(helloFirst: false, delay: .milliseconds(50))
        #expect(try Echo.handshakeAndEcho(socket, "late"))
        // The control socket still takes connections afterwards.
        let next = try echo.connect(helloFirst: true)
        #expect(try Echo.handshakeAndEcho(next, "next"))
    }

    @Test("a reply over the host's maximum frame size is an error for that request, not the connection's end")
    func replyOverTheHostsLimit() async throws {
        let echo = try await Echo()
        let (host, ext) = try FrameSocket.makeSocketPair()
        let socket = FrameSocket(descriptor: host)
        // This host takes frames of at most the protocol's minimum; the echo of a larger request
        // would exceed it.
        let limit = ExtSandboxWire.minimumMaximumFrameSize
        try socket.send(.hello(Hello(maximumFrameSize: limit, name: "small")))
        try echo.control.send(.connect(id: 99, descriptor: ext))
        ext.close()
        #expect(try socket.receive()?.kind == .hello)
        try socket.send(.request(id: 1, payload: [UInt8](repeating: 7, count: Int(limit) * 2)))
        let refused = try #require(try socket.receive())
        #expect(refused.kind == .error && refused.id == 1)
        // The connection carries on.
        try socket.send(.request(id: 2, payload: Array("small".utf8)))
        let reply = try #require(try socket.receive())
        #expect(reply.kind == .reply && reply.id == 2 && reply.payload == Array("small".utf8))
    }

    @Test("a connection that stays busy from its first request does not hold up the next CONNECT")
    func busyConnection() async throws {
        let echo = try await Echo()
        let busy = try echo.connect(helloFirst: true)
        // Requests back to back from one thread from the start (not waiting for the extension's
        // HELLO, so that they are there when it first looks), replies drained by another, until
        // told to stop.
        final class Progress: Sendable {
            let stop = Atomic<Bool>(false)
            let drained = Atomic<Int>(0)
        }
        let progress = Progress()
        let socket = UncheckedSendableBox(busy)
        let writer = Thread {
            var id: UInt64 = 1
            while !progress.stop.load(ordering: .relaxed) {
                guard (try? socket.value.send(.request(id: id, payload: [UInt8](repeating: 1, count: 512)))) != nil else { return }
                id += 1
            }
        }
        let reader = Thread {
            while case .frame(let frame)? = try? socket.value.receiveNext(wait: true) {
                if frame.kind == .reply { progress.drained.add(1, ordering: .relaxed) }
            }
        }
        writer.start()
        reader.start()
        defer {
            progress.stop.store(true, ordering: .relaxed)
            shutdown(busy.descriptor!.rawValue, Int32(SHUT_RDWR))
        }
        while progress.drained.load(ordering: .relaxed) < 100 { try await Task.sleep(for: .milliseconds(1)) }
        // The next connection is answered while the first one is still busy.
        let next = try echo.connect(helloFirst: true)
        var readable = pollfd(fd: next.descriptor!.rawValue, events: Int16(POLLIN), revents: 0)
        let answered = poll(&readable, 1, 5000) == 1
        #expect(answered, "the extension answers the next HELLO while the busy connection runs")
        guard answered else { return }
        #expect(try Echo.handshakeAndEcho(next, "next"))
        let drainedBefore = progress.drained.load(ordering: .relaxed)
        try await Task.sleep(for: .milliseconds(20))
        #expect(progress.drained.load(ordering: .relaxed) > drainedBefore, "the busy connection is still served")
    }

    @Test("the host reading a reply wakes none of the extension's threads")
    func readingAReplyWakesNoThread() async throws {
        let echo = try await Echo()
        let first = try echo.connect(helloFirst: true)
        #expect(try Echo.handshakeAndEcho(first, "first"))
        // A second connection takes the control socket over: the first one's reader then waits
        // for its connection alone (the case that waited in `recvmsg`).
        let second = try echo.connect(helloFirst: true)
        #expect(try Echo.handshakeAndEcho(second, "second"))
        let pids = Array(echo.sandbox.processIdentifiers().dropFirst())
        /// Voluntary context switches of all the extension's threads: a thread woken counts one.
        func switches() -> Int {
            pids.flatMap { pid in
                ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).compactMap { task in
                    (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8))?
                        .split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
                        .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
                }
            }.reduce(0, +)
        }
        var wakes = 0
        for index in 2...21 {
            try first.send(.request(id: UInt64(index), payload: Array("ping".utf8)))
            // The reply is written and the reader waits again before the host reads the reply.
            usleep(5_000)
            let before = switches()
            let reply = try #require(try first.receive())
            #expect(reply.kind == .reply && reply.id == UInt64(index))
            usleep(5_000)
            wakes += switches() - before
        }
        // A reader blocked in `recvmsg` was woken by each read (AF_UNIX wakes a socket's waiters
        // when the bytes it sent are consumed): 20 wakes. Allow a stray one.
        #expect(wakes <= 2, "\(wakes) wake-ups of the extension's threads for 20 replies read")
    }

    @Test("a new connection's thread looks for the first request briefly, then sleeps until it comes")
    func firstRequestLookIsBounded() async throws {
        let echo = try await Echo()
        let pids = Array(echo.sandbox.processIdentifiers().dropFirst())
        /// CPU time of all the extension's threads (schedstat: exact), in seconds.
        func cpu() -> Double {
            pids.flatMap { pid in
                ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).compactMap { task in
                    (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/schedstat", encoding: .utf8))?
                        .split(separator: " ").first.flatMap { Double($0) }
                }
            }.reduce(0, +) / 1e9
        }
        let socket = try echo.connect(helloFirst: true)
        let hello = try #require(try socket.receive())
        #expect(hello.kind == .hello)
        // No request for a while: the thread that answered the HELLO must not go on spinning.
        let before = cpu()
        try await Task.sleep(for: .milliseconds(300))
        let spent = cpu() - before
        #expect(spent < 0.03, "the extension used \(Int(spent * 1000)) ms of CPU while its new connection was idle for 300 ms")
        // The request that finally comes is answered.
        try socket.send(.request(id: 1, payload: Array("late".utf8)))
        let reply = try #require(try socket.receive())
        #expect(reply.kind == .reply && reply.payload == Array("late".utf8))
    }

    @Test("many CONNECTs back to back, then one after another")
    func manyConnections() async throws {
        let echo = try await Echo()
        // Sixteen at once, half of them with a late HELLO: every one is answered.
        let sockets = try (0..<16).map { try echo.connect(helloFirst: $0 % 2 == 0) }
        for (index, socket) in sockets.enumerated() {
            #expect(try Echo.handshakeAndEcho(socket, "at once \(index)"))
        }
        for socket in sockets {
            try socket.send(.goodbye)
            socket.close()
        }
        // One after another, each closed before the next: threads are reused, none piles up.
        for index in 0..<50 {
            let socket = try echo.connect(helloFirst: true)
            #expect(try Echo.handshakeAndEcho(socket, "in turn \(index)"))
            try socket.send(.goodbye)
            #expect(try socket.receive() == nil, "the extension closes its end after GOODBYE")
            socket.close()
        }
        let threads = echo.sandbox.processIdentifiers().dropFirst().map { pid in
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).count
        }.reduce(0, +)
        // The SDK's threads (control turns, at most four idle ones) plus the Swift runtime's.
        #expect(threads < 16, "\(threads) threads")
    }
}

/// For a value two threads use in ways the compiler cannot check (a FrameSocket's two sides).
struct UncheckedSendableBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
