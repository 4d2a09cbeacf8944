import ExtSandbox
import ExtSandboxWire
import Foundation
import Glibc
import SandboxRuntime
import Testing
import TestSupport

/// A misbehaving extension must never hurt the host: each kind of bad input closes that
/// connection with a clear error, its pending request fails once, memory and fds stay
/// bounded, and other connections and extensions carry on.
@Suite("Malformed input from an extension")
struct MalformedInputTests {
    static let script: String = {
        let path = TestPaths.fixturesDirectory + "/misbehaving_extension.py"
        return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }()

    static func openFDCount() -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count
    }

    @Test("bad input closes only that connection, with a clear error and its typed WireError (§9)", arguments: [
        ("oversize", "frame too large"), ("truncated", "truncated frame"), ("garbage", "protocol error"),
        ("unknown-kind", "unknown frame kind 99"), ("unknown-id", "unknown request id"),
    ])
    func misbehaviour(behaviour: String, expected: String) async throws {
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "\(behaviour)/\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", Self.script])
        let bad = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { bad.invalidate() }
        let good = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { good.invalidate() }
        let goodConnection = try await good.makeConnection()
        defer { goodConnection.invalidate() }

        let connection = try await bad.makeConnection()
        var failures: [ExtensionError] = []
        do {
            _ = try await connection.send(HostFixtures.message("anything"))
        } catch {
            failures.append(error)
        }
        #expect(failures.count == 1)
        let text = failures.first.map { "\($0)" } ?? ""
        #expect(text.contains(expected), "\(text)")
        // The cause is kept typed, not flattened into the text.
        switch (behaviour, failures.first) {
        case ("oversize", .protocolError(.frameTooLarge)?), ("truncated", .protocolError(.truncatedFrame)?),
             ("unknown-kind", .protocolError(.unknownKind(99))?), ("unknown-id", .protocolError(.unknownRequestID(kind: .reply, id: _))?),
             ("garbage", .protocolError?):
            break
        default:
            Issue.record("\(behaviour): not the typed WireError expected: \(String(describing: failures.first))")
        }
        #expect(failures.first?.underlying is WireError)
        #expect(!connection.isOpen)
        // The other extension is untouched.
        #expect(HostFixtures.text(try await goodConnection.send(HostFixtures.message("fine"))) == "fine")
    }

    @Test("a flood of one-way messages (with fds) to a host without a handler is dropped; the connection carries on",
          arguments: ["flood", "fd-flood"])
    func oneWayFlood(behaviour: String) async throws {
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "\(behaviour)/\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", Self.script])
        let bad = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { bad.invalidate() }
        let connection = try await bad.makeConnection()
        defer { connection.invalidate() }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("anything"))) == "flooded")
        #expect(connection.isOpen)
    }

    @Test("an extension that never answers the handshake does not hang the host")
    func silentHandshake() async throws {
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "silent/\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", Self.script])
        let process = try await AppExtensionProcess(configuration: .init(identity: identity, readyTimeout: .milliseconds(500)))
        defer { process.invalidate() }
        let started = ContinuousClock.now
        await #expect(throws: ExtensionError.self) { _ = try await process.makeConnection() }
        // Below the default ready timeout (10 s): the configured one ended the wait.
        #expect(ContinuousClock.now - started < .seconds(7))
    }

    @Test("an fd flood leaves no descriptor behind in the host", .oneExitTestAtATime)
    func fdFloodLeavesNothing() async {
        // In a process of its own (an exit test): other suites' descriptors do not count.
        await #expect(processExitsWith: .success) {
            func flood() async {
                let identity = AppExtensionIdentity.developmentOnly(
                    bundleIdentifier: "fd-flood/\(UUID().uuidString)", executablePath: "/usr/bin/python3",
                    point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
                    arguments: ["-c", MalformedInputTests.script])
                guard let bad = try? await AppExtensionProcess(configuration: .init(identity: identity)),
                      let connection = try? await bad.makeConnection() else { exit(2) }
                _ = try? await connection.send(HostFixtures.message("x"))
                bad.invalidate()
            }
            await flood()  // warm-up: the supervisor's threads and epoll fd exist afterwards
            try? await Task.sleep(for: .milliseconds(1000))
            let before = MalformedInputTests.openFDCount()
            for _ in 0..<3 { await flood() }
            // An invalidated process gets GOODBYE and half a second to exit (this script ignores
            // it) before it is killed, and the host closes its control socket once it has heard
            // of the end: on a loaded machine well after a second. A leak never goes away, so
            // the count is polled (up to a bound far past any such delay), not read once.
            var after = MalformedInputTests.openFDCount()
            let settling = ContinuousClock.now
            while after > before && ContinuousClock.now - settling < .seconds(60) {
                try? await Task.sleep(for: .milliseconds(100))
                after = MalformedInputTests.openFDCount()
            }
            if after > before {
                FileHandle.standardError.write(Data("fds before \(before), after \(after)\n".utf8))
                exit(1)
            }
            exit(0)
        }
    }
}

/// The Python example (Examples/python-echo), written from docs/wire-protocol.md alone, driven
/// through the real host API in a real sandbox.
@Suite("An extension in another language")
struct PythonExtensionTests {
    @Test("the Python example answers through the host API")
    func pythonEcho() async throws {
        let script = try String(
            contentsOfFile: TestPaths.packageRoot.appendingPathComponent("Examples/python-echo/extension.py").path, encoding: .utf8)
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "com.example.python-echo.\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", script])
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("from Swift"))) == "from Swift")
        try connection.sendOneWay(HostFixtures.message("one"))
        try connection.sendOneWay(HostFixtures.message("two"))
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("count"))) == "2")
        var template = Array("/tmp/xsb-py-XXXXXX".utf8CString)
        let fd = try #require(FileDescriptor(adopting: mkstemp(&template)))
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        #expect(ftruncate(fd.rawValue, 12345) == 0)
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("memfd:size", fds: [fd]))) == "12345")
        await #expect(throws: ExtensionError.self) { _ = try await connection.send(HostFixtures.message("fail:on purpose")) }
    }
}
