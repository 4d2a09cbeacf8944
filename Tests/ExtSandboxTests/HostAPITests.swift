import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime
import Testing

@Suite("Host API: launch, connections, lifecycle, interruption")
struct HostAPITests {
    @Test("launch, request and reply, one-way, error answer")
    func requestReply() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        let reply = try await connection.send(HostFixtures.message("hello"))
        #expect(HostFixtures.text(reply) == "hello")
        try connection.sendOneWay(HostFixtures.message("noted"))
        await #expect(throws: ExtensionError.self) { _ = try await connection.send(HostFixtures.message("fail")) }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("still fine"))) == "still fine")
    }

    /// A sole outstanding request waits for its reply on the caller's thread for a moment, while
    /// the monitor thread watches the same socket: quick and slow replies, one at a time and many
    /// at once, each reach their own request exactly once.
    /// Every thread of every extension is in every launch's cost: the init's `pivot_root` visits
    /// each thread on the machine. The SDK's `main` starts on the main actor, so an extension that
    /// answers without suspending never starts libdispatch's threads (a nonisolated `main` hopped
    /// to the global executor first: two worker threads and the event thread in every extension).
    @Test("an SDK extension answering requests runs three threads: main, the connection's, one spare")
    func sdkExtensionThreads() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(), suspendAfter: .seconds(60)))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        for index in 0..<20 {
            #expect(HostFixtures.text(try await connection.send(HostFixtures.message("r\(index)"))) == "r\(index)")
        }
        let program = try #require(process.sandbox.processIdentifiers().dropFirst().first)
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(program)/task")) ?? []
        let names = threads.map { ((try? String(contentsOfFile: "/proc/\(program)/task/\($0)/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines) }
        #expect(threads.count == 3, "\(names)")
    }

    @Test("quick and slow replies, alone and concurrent, each reach their own request")
    func repliesReachTheirRequests() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        for round in 0..<40 {
            // "sleep 2" answers after 2 ms, beyond the caller's wait; "sleep 0" at once.
            let command = round % 3 == 0 ? "sleep 2" : round % 3 == 1 ? "sleep 0" : "quick \(round)"
            #expect(HostFixtures.text(try await connection.send(HostFixtures.message(command))) == command)
        }
        let replies = try await withThrowingTaskGroup(of: (String, String).self) { group in
            for index in 0..<32 {
                let command = index % 4 == 0 ? "sleep 1" : "concurrent \(index)"
                group.addTask { (command, HostFixtures.text(try await connection.send(HostFixtures.message(command)))) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(replies.count == 32)
        for (sent, received) in replies { #expect(sent == received) }
    }
}

@Suite("Host API lifecycle")
struct HostLifecycleTests {
    @Test("a second handle reuses the running process")
    func reuse() async throws {
        let identity = HostFixtures.identity()
        let recorder = Recorder()
        let first = try await AppExtensionProcess(configuration: .init(identity: identity, onEvent: recorder.onEvent))
        let second = try await AppExtensionProcess(configuration: .init(identity: identity, onEvent: recorder.onEvent))
        #expect(first.sandbox.pid == second.sandbox.pid)
        #expect(recorder.recordedEvents.filter { if case .launched = $0 { return true } else { return false } }.count == 1)
        #expect(recorder.recordedEvents.contains(.reused))
        first.invalidate()
        second.invalidate()
    }

    @Test("two connections keep it running; with none it is suspended, and a new connection resumes it")
    func suspendAndResume() async throws {
        let recorder = Recorder()
        let process = try await AppExtensionProcess(configuration: .init(
            identity: HostFixtures.identity(), onEvent: recorder.onEvent, suspendAfter: .milliseconds(100)))
        defer { process.invalidate() }
        let a = try await process.makeConnection(), b = try await process.makeConnection()
        a.invalidate()
        try await Task.sleep(for: .milliseconds(400))
        #expect(!recorder.recordedEvents.contains(.suspended), "one connection is still open")
        #expect(HostFixtures.text(try await b.send(HostFixtures.message("b"))) == "b")
        b.invalidate()
        let inside = process.sandbox.processIdentifiers().dropFirst()
        #expect(await HostFixtures.eventually { recorder.recordedEvents.contains(.suspended) })
        #expect(await HostFixtures.eventually { inside.allSatisfy { HostFixtures.processState($0) == "T" } },
                "\(inside.map { HostFixtures.processState($0) ?? "gone" })")
        let c = try await process.makeConnection()
        #expect(recorder.recordedEvents.contains(.resumed))
        #expect(HostFixtures.text(try await c.send(HostFixtures.message("awake"))) == "awake")
        c.invalidate()
    }

    @Test("idle termination is not an interruption")
    func idleTermination() async throws {
        let recorder = Recorder()
        let process = try await AppExtensionProcess(configuration: .init(
            identity: HostFixtures.identity(), onInterruption: recorder.onInterruption, onEvent: recorder.onEvent,
            suspendAfter: .milliseconds(50), terminateAfter: .milliseconds(200)))
        let connection = try await process.makeConnection()
        connection.invalidate()
        #expect(await HostFixtures.eventually { recorder.recordedEvents.contains(.terminated) })
        #expect(recorder.recordedInterruptions.isEmpty)
        // The next connection launches a fresh process.
        let again = try await process.makeConnection()
        #expect(HostFixtures.text(try await again.send(HostFixtures.message("fresh"))) == "fresh")
        again.invalidate()
        process.invalidate()
    }

    @Test("invalidating the only handle severs its connections and ends the process with GOODBYE (exit 0)")
    func invalidateEnds() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        let sandbox = process.sandbox
        let connection = try await process.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("x"))) == "x")
        process.invalidate()
        #expect(!connection.isOpen, "the handle's connections go with it")
        await #expect(throws: ExtensionError.self) { _ = try await connection.send(HostFixtures.message("after")) }
        // Ended on purpose: GOODBYE on the control socket, and the SDK exits 0 within the grace.
        #expect(await HostFixtures.exit(of: sandbox) == .exited(code: 0))
        await #expect(throws: ExtensionError.self) { _ = try await process.makeConnection() }
    }

    @Test("dropping the last reference to a handle invalidates its connections and ends the process")
    func droppedReferences() async throws {
        var process: AppExtensionProcess? = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        let sandbox = process!.sandbox
        let connection = try await process!.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("x"))) == "x")
        process = nil
        #expect(!connection.isOpen)
        await #expect(throws: ExtensionError.self) { _ = try await connection.send(HostFixtures.message("after")) }
        #expect(await HostFixtures.exit(of: sandbox) == .exited(code: 0))
    }
}

@Suite("Host API interruption")
struct HostInterruptionTests {
    /// Starts a request that does not finish by itself, then ends the process by `cause`;
    /// the request must fail once and the handler run once with the reason.
    func interrupt(level: String = "standard", cause: (AppExtensionProcess, ExtensionConnection) async throws -> Void,
                   expect: (String) -> Bool) async throws {
        let recorder = Recorder()
        let process = try await AppExtensionProcess(configuration: .init(
            identity: HostFixtures.identity(level: level), onInterruption: recorder.onInterruption, onEvent: recorder.onEvent))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        let pending = Task { try await connection.send(HostFixtures.message("sleep 60000")) }
        try await Task.sleep(for: .milliseconds(50))
        try await cause(process, connection)
        var failures = 0
        do { _ = try await pending.value } catch { failures += 1 }
        #expect(failures == 1)
        #expect(await HostFixtures.eventually { recorder.recordedInterruptions.count == 1 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(recorder.recordedInterruptions.count == 1, "exactly once: \(recorder.recordedInterruptions)")
        let matches = recorder.recordedInterruptions.allSatisfy(expect)
        #expect(matches, "\(recorder.recordedInterruptions)")
        // A later connection launches a fresh process.
        let again = try await process.makeConnection()
        #expect(HostFixtures.text(try await again.send(HostFixtures.message("again"))) == "again")
        again.invalidate()
    }

    @Test("SIGKILL from outside")
    func killed() async throws {
        try await interrupt(cause: { process, _ in kill(process.sandbox.pid, SIGKILL) }, expect: { $0 == "killed" })
    }

    @Test("a crash")
    func crash() async throws {
        try await interrupt(cause: { _, connection in _ = try? await connection.send(HostFixtures.message("crash")) },
                            expect: { $0.contains("signal 11") })
    }

    @Test("a seccomp kill names the syscall")
    func seccompKill() async throws {
        try await interrupt(level: "hardened", cause: { _, connection in _ = try? await connection.send(HostFixtures.message("socket")) },
                            expect: { $0 == "seccomp violation: socket" })
    }
}

@Suite("Host API connections")
struct HostConnectionTests {
    @Test("the extension may reject a connection")
    func rejected() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(name: "reject-me")))
        defer { process.invalidate() }
        await #expect(throws: ExtensionError.self) { _ = try await process.makeConnection() }
    }

    @Test("a file descriptor travels with a message (a memfd for a large payload)")
    func fdPassing() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        // An unlinked temporary file stands in for a memfd here: any descriptor travels alike.
        var template = Array("/tmp/xsb-payload-XXXXXX".utf8CString)
        let fd = try #require(FileDescriptor(adopting: mkstemp(&template)))
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        #expect(ftruncate(fd.rawValue, 3 << 20) == 0)
        let reply = try await connection.send(HostFixtures.message("memfd", fds: [fd]))
        #expect(HostFixtures.text(reply) == "\(3 << 20)")
    }

    @Test("cancelling the task cancels the request; the connection stays usable")
    func cancellation() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        let slow = Task { try await connection.send(HostFixtures.message("sleep 60000")) }
        try await Task.sleep(for: .milliseconds(50))
        slow.cancel()
        let started = Date()
        await #expect(throws: ExtensionError.self) { _ = try await slow.value }
        // Far below the request's 60 s: the cancellation ended it.
        #expect(Date().timeIntervalSince(started) < 20)
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("next"))) == "next")
    }

    @Test("an extension built with the SDK runs under the hardened policy", arguments: ["standard", "restricted", "hardened"])
    func underEveryLevel(level: String) async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(level: level)))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        for index in 0..<20 {
            #expect(HostFixtures.text(try await connection.send(HostFixtures.message("ping \(index)"))) == "ping \(index)")
        }
    }
}

@Suite("Host API Codable messages")
struct HostCodableTests {
    struct Point: Codable, Equatable { var x: Int; var label: String }

    @Test("typed request and response through JSON")
    func codable() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        // The echo fixture returns the request's bytes: the reply decodes as what was sent.
        let reply = try await connection.send(Point(x: 42, label: "sandboxed"), expecting: Point.self)
        #expect(reply == Point(x: 42, label: "sandboxed"))
        await #expect(throws: ExtensionError.self) { _ = try await connection.send(Point(x: 1, label: "x"), expecting: [String].self) }
    }
}
