import ExtSandbox
import Foundation
import Glibc
import Testing
import TestSupport
import TextFilterContract

/// A hostile extension (Tests/Fixtures/hostile_actors_extension.py) against the host's actor
/// system: garbage call envelopes, a result that is no value, a reply for no call.
@Suite("Distributed calls from a hostile extension")
struct HostileCallerTests {
    static let script: String = {
        (try? String(contentsOfFile: TestPaths.fixturesDirectory + "/hostile_actors_extension.py", encoding: .utf8)) ?? ""
    }()

    static func identity() -> AppExtensionIdentity {
        AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "hostile-\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", script])
    }

    @Test("malformed envelopes get typed ERROR answers; a bad result and a reply for no call fail only their connection")
    func hostileExtension() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: Self.identity()))
        defer { process.invalidate() }
        let first = try await process.makeConnection(exporting: $HostNotes.self) { Notes(actorSystem: $0) }
        defer { first.invalidate() }
        let second = try await process.makeConnection(exporting: $HostNotes.self) { Notes(actorSystem: $0) }
        defer { second.invalidate() }
        let firstFilter = try first.remoteObject($TextFilter.self), secondFilter = try second.remoteObject($TextFilter.self)
        // The host's answers to the garbage, in order: malformed (20), unknown target (21), unknown
        // method (22), undecodable arguments (23); the valid call among them was answered.
        let codes = "20,20,21,22,23,23,20,23,reply,20"
        #expect(try await firstFilter.apply("codes", options: FilterOptions()) == codes)
        #expect(try await secondFilter.apply("codes", options: FilterOptions()) == codes)
        await #expect {
            _ = try await firstFilter.apply("garbage", options: FilterOptions())
        } throws: { error in
            guard case DistributedCallError.malformedResult = error else { return false }
            return true
        }
        #expect(first.isOpen)
        await #expect {
            _ = try await firstFilter.apply("unasked", options: FilterOptions())
        } throws: { error in
            guard case ExtensionError.protocolError(.unknownRequestID) = error else { return false }
            return true
        }
        #expect(!first.isOpen)
        // The other connection carries on.
        #expect(second.isOpen)
        await #expect {
            _ = try await secondFilter.apply("garbage", options: FilterOptions())
        } throws: { error in
            guard case DistributedCallError.malformedResult = error else { return false }
            return true
        }
        #expect(second.isOpen)
    }

    @Test("round after round of garbage calls leave the host's fds and memory flat", .oneExitTestAtATime)
    func flat() async {
        // In a process of its own (an exit test): other suites' descriptors do not count.
        await #expect(processExitsWith: .success) {
            func fail(_ why: String) -> Never {
                FileHandle.standardError.write(Data("\(why)\n".utf8))
                exit(1)
            }
            TextFilterContract.register()
            guard let process = try? await AppExtensionProcess(configuration: .init(identity: HostileCallerTests.identity())) else { fail("no process") }
            /// One connection: the garbage is all answered once the first call returns.
            func round() async {
                guard let connection = try? await process.makeConnection(exporting: $HostNotes.self, { Notes(actorSystem: $0) }),
                      let filter = try? connection.remoteObject($TextFilter.self),
                      (try? await filter.apply("codes", options: FilterOptions())) != nil else { fail("a round failed") }
                connection.invalidate()
            }
            for _ in 0..<10 { await round() }
            try? await Task.sleep(for: .milliseconds(200))
            let fdsBefore = ProcessFigures.openFileDescriptors(), memoryBefore = ProcessFigures.residentKiB()
            for _ in 0..<100 { await round() }
            try? await Task.sleep(for: .milliseconds(200))
            let fdsAfter = ProcessFigures.openFileDescriptors(), memoryAfter = ProcessFigures.residentKiB()
            process.invalidate()
            guard fdsAfter <= fdsBefore else { fail("fds grew from \(fdsBefore) to \(fdsAfter) over 100 rounds") }
            guard memoryAfter - memoryBefore < 4096 else { fail("memory grew from \(memoryBefore) KiB to \(memoryAfter) KiB over 100 rounds") }
        }
    }
}
