import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime
import Synchronization
import Testing

/// ExtensionFoundation's lifecycle, handle by handle (issue 11).
@Suite("Host API lifecycle, per handle")
struct PerHandleLifecycleTests {
    @Test("each handle's own onInterruption and onEvent run (not only the first handle's)")
    func perHandleCallbacks() async throws {
        let identity = HostFixtures.identity()
        let first = Recorder(), second = Recorder()
        let a = try await AppExtensionProcess(configuration: .init(
            // Long enough that the second handle attaches before the idle suspension even when
            // the suite's parallel tests load the machine (with 50 ms it sometimes came after,
            // and a handle never hears of a suspension that happened before it existed).
            identity: identity, onInterruption: first.onInterruption, onEvent: first.onEvent, suspendAfter: .milliseconds(1000)))
        defer { a.invalidate() }
        let b = try await AppExtensionProcess(configuration: .init(
            identity: identity, onInterruption: second.onInterruption, onEvent: second.onEvent))
        defer { b.invalidate() }
        #expect(a.sandbox.pid == b.sandbox.pid)
        #expect(second.recordedEvents.first == .reused)
        #expect(!first.recordedEvents.contains(.suspended), "suspended before the second handle attached: \(first.recordedEvents)")
        // Never connected: suspended by the launching handle's timer; both handles hear it.
        #expect(await HostFixtures.eventually { first.recordedEvents.contains(.suspended) && second.recordedEvents.contains(.suspended) },
                "\(first.recordedEvents) \(second.recordedEvents)")
        kill(a.sandbox.pid, SIGKILL)
        #expect(await HostFixtures.eventually { first.recordedInterruptions.count == 1 && second.recordedInterruptions.count == 1 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(first.recordedInterruptions == ["killed"] && second.recordedInterruptions == ["killed"],
                "exactly once each: \(first.recordedInterruptions) \(second.recordedInterruptions)")
        #expect(second.recordedEvents.contains(.interrupted(.killed)))
    }

    @Test("a launched process nobody connects to is suspended, then ended with GOODBYE (exit 0)")
    func neverConnected() async throws {
        let recorder = Recorder()
        let process = try await AppExtensionProcess(configuration: .init(
            identity: HostFixtures.identity(), onInterruption: recorder.onInterruption, onEvent: recorder.onEvent,
            // Ended 5 s after it goes idle: time to see it stopped even on a loaded test run.
            suspendAfter: .milliseconds(100), terminateAfter: .seconds(5)))
        defer { process.invalidate() }
        let sandbox = process.sandbox
        let inside = sandbox.processIdentifiers().dropFirst()
        #expect(await HostFixtures.eventually { recorder.recordedEvents.contains(.suspended) })
        #expect(await HostFixtures.eventually { inside.allSatisfy { HostFixtures.processState($0) == "T" } },
                "\(inside.map { HostFixtures.processState($0) ?? "gone" })")
        // Continued to read its GOODBYE, it exits 0 of its own accord.
        #expect(await HostFixtures.exit(of: sandbox, within: 60) == .exited(code: 0))
        #expect(await HostFixtures.eventually { recorder.recordedEvents.contains(.terminated) })
        #expect(recorder.recordedInterruptions.isEmpty)
    }

    @Test("invalidate() severs that handle's connections only; the process lives for the other handle")
    func invalidateOneHandle() async throws {
        let identity = HostFixtures.identity()
        let a = try await AppExtensionProcess(configuration: .init(identity: identity))
        let b = try await AppExtensionProcess(configuration: .init(identity: identity))
        let pid = a.sandbox.pid
        let fromA = try await a.makeConnection(), fromB = try await b.makeConnection()
        let pending = Task { try await fromA.send(HostFixtures.message("sleep 60000")) }
        try await Task.sleep(for: .milliseconds(50))
        a.invalidate()
        await #expect(throws: ExtensionError.self) { _ = try await pending.value }
        #expect(!fromA.isOpen)
        #expect(HostFixtures.text(try await fromB.send(HostFixtures.message("b lives"))) == "b lives")
        #expect(b.sandbox.pid == pid && b.sandbox.isRunning)
        let sandbox = b.sandbox
        b.invalidate()
        #expect(await HostFixtures.exit(of: sandbox) == .exited(code: 0))
    }

    @Test("the extension's own GOODBYE on its control socket is an orderly end, not an interruption")
    func extensionsGoodbye() async throws {
        let recorder = Recorder()
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "goodbye/\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", MalformedInputTests.script])
        let process = try await AppExtensionProcess(configuration: .init(
            identity: identity, onInterruption: recorder.onInterruption, onEvent: recorder.onEvent))
        defer { process.invalidate() }
        let sandbox = process.sandbox
        let connection = try await process.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("last"))) == "bye")
        #expect(await HostFixtures.exit(of: sandbox) == .exited(code: 0))
        #expect(await HostFixtures.eventually { recorder.recordedEvents.contains(.terminated) })
        try await Task.sleep(for: .milliseconds(100))
        #expect(recorder.recordedInterruptions.isEmpty, "\(recorder.recordedInterruptions)")
    }
}
