import ExtSandbox
import ExtSandboxWire
import Foundation
import Glibc
import SandboxRuntime
import Synchronization
import Testing
import TestSupport

/// The channel as docs/wire-protocol.md defines it (issue 11): version mismatch, oversize
/// requests, invalidate racing the extension's close, back-pressure.
@Suite("Host API channel")
struct ChannelTests {
    static func pythonIdentity(_ behaviour: String) -> AppExtensionIdentity {
        AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "\(behaviour)/\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", MalformedInputTests.script])
    }

    @Test("a HELLO with another version gets ERROR id 0 code 4 before the close (§5.3)")
    func versionMismatch() async throws {
        // Not suspended while the script finishes on its own: with no connection open the host
        // stops the sandbox after `suspendAfter` (250 ms by default), which a loaded machine's
        // slow Python may not beat. A fresh-clone CI run saw no exit within 5 s.
        let process = try await AppExtensionProcess(configuration: .init(identity: Self.pythonIdentity("bad-version"), suspendAfter: .seconds(120)))
        defer { process.invalidate() }
        let sandbox = process.sandbox
        do {
            _ = try await process.makeConnection()
            Issue.record("the handshake succeeded")
        } catch ExtensionError.protocolError(.unsupportedVersion(let version, let supported)) {
            // The typed WireError the wire document promises (§9).
            #expect(version == 2 && supported == 1)
        }
        // The script exits 44 when what it read after its HELLO was ERROR id 0 code 4, 45 when it
        // was another frame, 46 when the connection ended without one.
        #expect(await HostFixtures.exit(of: sandbox, within: 60) == .exited(code: 44))
    }

    @Test("a request over the extension's maximum frame size fails on its own; the connection stays open")
    func oversizeRequest() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: Self.pythonIdentity("small-max")))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        do {
            _ = try await connection.send(ExtensionMessage([UInt8](repeating: 1, count: 8192)))
            Issue.record("an 8 KiB request to an extension that takes 4 KiB frames was sent")
        } catch ExtensionError.messageTooLarge(let size, let maximum) {
            #expect(size == 16 + 8192 && maximum == 4096)
        }
        #expect(throws: ExtensionError.self) { try connection.sendOneWay(ExtensionMessage([UInt8](repeating: 1, count: 8192))) }
        #expect(connection.isOpen)
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("small"))) == "small")
    }

    @Test("invalidate() racing the extension's close on GOODBYE always reports invalidated (1,000 times)")
    func invalidateRace() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        var wrong: [String] = []
        for round in 0..<1000 {
            let connection = try await process.makeConnection()
            #expect(HostFixtures.text(try await connection.send(HostFixtures.message("r"))) == "r")
            connection.invalidate()
            do {
                _ = try await connection.send(HostFixtures.message("after"))
                wrong.append("round \(round): sent after invalidate")
            } catch ExtensionError.invalidated {
            } catch {
                wrong.append("round \(round): \(error)")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
    }

    /// An extension that stops reading: the host's memory and fds stay under the queue's bounds,
    /// sends wait, one-way messages fail fast, and cancelled requests leave with their fds.
    @Test("back-pressure: a non-reading extension cannot grow the host's memory or fds", .oneExitTestAtATime)
    func backPressure() async {
        // In a process of its own (an exit test): other suites' descriptors do not count.
        await #expect(processExitsWith: .success) {
            func fail(_ why: String) -> Never {
                FileHandle.standardError.write(Data("\(why)\n".utf8))
                exit(1)
            }
            func fds() -> Int { ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count }
            func residentKiB() -> Int {
                let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
                let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
                return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
            }
            let limit = ExtensionConnection.SendQueueLimit(bytes: 1 << 20, fileDescriptors: 8)
            guard let process = try? await AppExtensionProcess(configuration: .init(
                identity: ChannelTests.pythonIdentity("no-read"), sendQueueLimit: limit)),
                  let connection = try? await process.makeConnection() else { fail("no connection") }
            guard let devNull = FileDescriptor(adopting: open("/dev/null", O_RDONLY | O_CLOEXEC)) else { fail("no /dev/null") }
            try? await Task.sleep(for: .milliseconds(200))
            let fdsBefore = fds(), memoryBefore = residentKiB()
            // 128 requests of 512 KiB each (64 MiB in all), each with an fd, to a reader that
            // never reads.
            let senders = (0..<128).map { index in
                Task {
                    let payload = [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: 512 << 10)
                    _ = try await connection.send(ExtensionMessage(payload, fileDescriptors: [devNull]))
                }
            }
            try? await Task.sleep(for: .milliseconds(500))
            let fdsWhileFull = fds()
            // The queue holds at most 8 fds (and the socket's buffer some more, in flight).
            if fdsWhileFull > fdsBefore + limit.fileDescriptors + 2 { fail("fds \(fdsBefore) -> \(fdsWhileFull) while full") }
            do {
                try connection.sendOneWay(ExtensionMessage([UInt8](repeating: 1, count: 512 << 10)))
                fail("a one-way message was queued into a full queue")
            } catch ExtensionError.sendQueueFull {
            } catch {
                fail("sendOneWay: \(error)")
            }
            for sender in senders { sender.cancel() }
            for sender in senders {
                if (try? await sender.value) != nil { fail("a request to a non-reading extension was answered") }
            }
            try? await Task.sleep(for: .milliseconds(200))
            let fdsAfter = fds(), memoryAfter = residentKiB()
            // Cancelled requests never written are gone from the queue, with their payloads and fds.
            if fdsAfter > fdsBefore + 2 { fail("fds \(fdsBefore) -> \(fdsAfter) after cancelling") }
            if memoryAfter - memoryBefore > 16 << 10 { fail("resident memory \(memoryBefore) KiB -> \(memoryAfter) KiB") }
            if !connection.isOpen { fail("the connection closed") }
            devNull.close()
            connection.invalidate()
            process.invalidate()
            exit(0)
        }
    }
}
