import ExtSandbox
import ExtSandboxWire
import Foundation
import Glibc
import Synchronization
import Testing
import TestSupport

/// An extension can hand its host a descriptor whose plain `close(2)` blocks for minutes: a TCP
/// socket on the sandbox's own loopback with a full send buffer, a peer that never reads and
/// `SO_LINGER` 120 s (Tests/Fixtures/misbehaving_extension.py builds one in its sandbox). However
/// the host comes to close it, no thread of the host may wait for it.
@Suite("Descriptors from an extension whose close blocks")
struct LingeringDescriptorTests {
    /// What the child process is doing, for the watchdog's message.
    final class Step: Sendable {
        let name = Mutex("starting")
        func set(_ text: String) { name.withLock { $0 = text } }
    }

    @Test("the host stays responsive, other extensions answer, teardown returns at once", .oneExitTestAtATime, arguments: [
        "linger-late-reply",   // the answer to a cancelled request, dropped
        "linger-undeclared",   // a frame that declares no fd, with one: a protocol error
        "linger-reply",        // a reply handed to the caller, whose JSON convenience closes it
        "linger-teardown",     // a frame cut short, its fd held when the connection is invalidated
        "linger-unread",       // a frame left unread (reading paused) when the connection is invalidated
        "linger-on-control",   // a frame on the control socket, which allows none with an fd
    ])
    func hostStaysResponsive(scenario: String) async {
        // In a process of its own (an exit test): a host that blocks would stop every other test.
        let log = ExitTestLog()
        let result = await #expect(processExitsWith: .success) { [scenario, log = log as ExitTestLog] in
            let step = Step()
            func fail(_ why: String) -> Never {
                log.write("\(scenario): \(why)")
                exit(1)
            }
            // A blocked thread never returns: the watchdog ends the process, and the test fails.
            Thread.detachNewThread {
                sleep(30)
                log.write("\(scenario): still \(step.name.withLock { $0 }) after 30 s")
                _exit(3)
            }
            func returnsAtOnce(_ what: String, _ body: () -> Void) {
                step.set(what)
                let started = ContinuousClock.now
                body()
                if ContinuousClock.now - started > .seconds(5) { fail("\(what) took \(ContinuousClock.now - started)") }
            }
            do {
                step.set("launching the extension")
                let identity = scenario == "linger-on-control"
                    ? LifecycleFaultTests.python("echo", arguments: ["linger-on-control"]) : ChannelTests.pythonIdentity(scenario)
                let bad = try await AppExtensionProcess(configuration: .init(identity: identity))
                let (requestRead, signal) = AsyncStream<Void>.makeStream()
                switch scenario {
                case "linger-late-reply":
                    let connection = try await bad.makeConnection(handlers: .init(onOneWay: { _ in signal.yield() }))
                    step.set("cancelling a request")
                    let request = Task { try await connection.send(HostFixtures.message("first")) }
                    var read = requestRead.makeAsyncIterator()
                    _ = await read.next()  // the extension has the request
                    request.cancel()
                    _ = try? await request.value
                    // Its late answer brings the socket, which the host drops; the connection carries on.
                    step.set("sending after the late answer")
                    guard HostFixtures.text(try await connection.send(HostFixtures.message("after"))) == "after" else { fail("no echo") }
                case "linger-undeclared":
                    let connection = try await bad.makeConnection()
                    step.set("sending a request")
                    do {
                        _ = try await connection.send(HostFixtures.message("x"))
                        fail("answered")
                    } catch ExtensionError.protocolError(.fdCountMismatch(kind: .reply, id: _, declared: 0, received: 1)) {
                    }
                case "linger-reply":
                    let connection = try await bad.makeConnection()
                    step.set("sending a request whose reply brings the socket")
                    guard try await connection.send("x", expecting: String.self) == "ok" else { fail("not the reply") }
                case "linger-teardown":
                    let connection = try await bad.makeConnection()
                    let pending = Task { try? await connection.send(HostFixtures.message("x")) }
                    try await Task.sleep(for: .milliseconds(300))  // the frame's start (and fd) arrives
                    returnsAtOnce("invalidating the connection") { connection.invalidate() }
                    _ = await pending.value
                case "linger-unread":
                    // One request at a time, and the handler holds the first: the host stops reading.
                    let holding = ExtensionConnection.Handlers(onRequest: { _ in
                        try await Task.sleep(for: .seconds(3600))
                        return ExtensionMessage()
                    }, maximumOutstandingMessages: 1)
                    let connection = try await bad.makeConnection(handlers: holding)
                    let pending = Task { try? await connection.send(HostFixtures.message("x")) }
                    try await Task.sleep(for: .milliseconds(500))  // the frame with the fd waits in the socket
                    returnsAtOnce("invalidating the connection") { connection.invalidate() }
                    _ = await pending.value
                case "linger-on-control":
                    step.set("waiting for the control socket's frame")
                    try await Task.sleep(for: .seconds(1))
                default:
                    fail("unknown scenario")
                }
                // Another extension launches (its READY is read by the monitor thread) and answers.
                step.set("launching another extension")
                let other = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
                let otherConnection = try await other.makeConnection()
                step.set("asking the other extension")
                guard HostFixtures.text(try await otherConnection.send(HostFixtures.message("alive"))) == "alive" else { fail("no echo") }
                otherConnection.invalidate()
                other.invalidate()
                // Nor does a close wait on the threads that make them, while the extension (and so
                // the socket's peer) lives: the socket no longer lingers.
                step.set("waiting for the closes")
                UntrustedDescriptors.waitUntilClosed()
                returnsAtOnce("invalidating the hostile extension") { bad.invalidate() }
            } catch {
                fail("\(step.name.withLock { $0 }): \(error)")
            }
            exit(0)
        }
        log.finish(failed: result == nil)
    }
}
