import ExtSandbox
import Foundation
import Glibc
import Synchronization
import Testing
import TextFilterContract

/// What the host serves to the actors fixture: it notes what the extension tells it.
distributed actor Notes: HostNotes {
    typealias ActorSystem = ExtensionActorSystem
    distributed func note(_ text: String) -> String { "host noted: \(text)" }
}

/// Typed calls through `@Resolvable` proxies, both ways, against the actors fixture
/// (Tests/Fixtures/xsb-actors-extension) in a real sandbox.
@Suite("Distributed actors over a connection")
struct DistributedCallTests {
    init() {
        TextFilterContract.register()
    }

    static func identity(level: String = "hardened") -> AppExtensionIdentity {
        AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "actors-\(UUID().uuidString)", executablePath: HostFixtures.productsDirectory + "/xsb-actors-extension",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/\(level).yaml"))
    }

    /// A connection to a fresh actors fixture (exporting the host's `Notes` when asked) and the
    /// proxy of its filter, for `body`.
    static func withFilter(level: String = "hardened", exportingNotes: Bool = true,
                           _ body: (ExtensionConnection, $TextFilter) async throws -> Void) async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: identity(level: level)))
        defer { process.invalidate() }
        let connection = exportingNotes
            ? try await process.makeConnection(exporting: $HostNotes.self) { Notes(actorSystem: $0) }
            : try await process.makeConnection()
        defer { connection.invalidate() }
        try await body(connection, try connection.remoteObject($TextFilter.self))
    }

    @Test("the host calls the extension's object, which calls the host's on the same connection")
    func bothDirections() async throws {
        try await Self.withFilter { _, filter in try await Self.bothDirections(filter) }
    }

    static func bothDirections(_ filter: $TextFilter) async throws {
        #expect(try await filter.apply("hello", options: FilterOptions()) == "HELLO")
        #expect(try await filter.apply("quiet", options: FilterOptions(shout: false)) == "quiet")
        #expect(try await filter.askHost("ping") == "host noted: ping")
    }

    @Test("many calls at once on one connection, each answered to its caller")
    func concurrentCalls() async throws {
        try await Self.withFilter { _, filter in try await Self.concurrentCalls(filter) }
    }

    static func concurrentCalls(_ filter: $TextFilter) async throws {
        let correct = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<30 {
                group.addTask {
                    switch index % 3 {
                    case 0: try await filter.apply("text \(index)", options: FilterOptions()) == "TEXT \(index)"
                    case 1: try await filter.sleep(milliseconds: 20) == false
                    default: try await filter.askHost("n\(index)") == "host noted: n\(index)"
                    }
                }
            }
            return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(correct == 30)
    }

    @Test("a registered Codable error comes back as itself, any other as a remote error with its code and message")
    func errors() async throws {
        try await Self.withFilter(exportingNotes: false) { _, filter in try await Self.errors(filter) }
    }

    static func errors(_ filter: $TextFilter) async throws {
        await #expect(throws: FilterError.tooLong(limit: 3)) { _ = try await filter.apply("long", options: FilterOptions(limit: 3)) }
        await #expect(throws: DistributedCallError.remote(code: CallErrorCode.thrownError, message: "the filter failed plainly")) {
            try await filter.failPlainly()
        }
        // The extension's requests find no object on a connection that exports none.
        await #expect(throws: (any Error).self) { _ = try await filter.askHost("x") }
        #expect(try await filter.apply("still", options: FilterOptions()) == "STILL")
    }

    @Test("a method the object does not have and an object that does not exist are typed errors; the connection carries on")
    func unknownMethodAndTarget() async throws {
        try await Self.withFilter(exportingNotes: false) { connection, _ in try await Self.unknownMethodAndTarget(connection) }
    }

    static func unknownMethodAndTarget(_ connection: ExtensionConnection) async throws {
        // The extension's object is no HostNotes.
        let wrong = try connection.remoteObject($HostNotes.self)
        await #expect {
            _ = try await wrong.note("x")
        } throws: { error in
            guard case DistributedCallError.unknownMethod = error else { return false }
            return true
        }
        let system = ExtensionActorSystem(side: .host)
        system.attach(connection)
        let nobody = try $TextFilter.resolve(id: ExtensionActorID("nobody"), using: system)
        await #expect(throws: DistributedCallError.unknownTarget("no object named nobody")) {
            _ = try await nobody.apply("x", options: FilterOptions())
        }
        #expect(connection.isOpen)
        #expect(try await connection.remoteObject($TextFilter.self).apply("ok", options: FilterOptions()) == "OK")
    }

    @Test("cancelling the calling task cancels the call and the remote method's task")
    func cancellation() async throws {
        try await Self.withFilter(exportingNotes: false) { _, filter in try await Self.cancellation(filter) }
    }

    static func cancellation(_ filter: $TextFilter) async throws {
        let sleeping = Task { try await filter.sleep(milliseconds: 60_000) }
        try await Task.sleep(for: .milliseconds(200))
        sleeping.cancel()
        await #expect {
            _ = try await sleeping.value
        } throws: { error in
            guard case ExtensionError.cancelled = error else { return false }
            return true
        }
        // The remote method saw its cancellation.
        var seen = 0
        for _ in 0..<100 where seen == 0 {
            seen = try await filter.cancelledSleeps()
            if seen == 0 { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(seen == 1)
    }

    @Test("byte arrays large and small, as arguments and results, arrive exactly; so does a system ping's large value")
    func byteArrays() async throws {
        try await Self.withFilter(level: "standard", exportingNotes: false) { connection, filter in
            let large = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 10) }
            for bytes in [large, Array(large.prefix(16 << 10)), Array(large.prefix((16 << 10) - 1)), [7], []] {
                #expect(try await filter.echo(bytes) == bytes, "\(bytes.count) bytes")
                #expect(try await filter.count(bytes) == bytes.count)
            }
            // The value's bytes, read apart by the extension, come back as they were sent.
            let value = try ValueCoding.encode(large)
            let reply = try await connection.send(ExtensionMessage(SystemTarget.pingEnvelope(value)))
            #expect(reply.payload == value)
            // The connection carries on with small calls.
            #expect(try await filter.apply("after", options: FilterOptions()) == "AFTER")
        }
    }

    @Test("file descriptors as arguments and results travel as SCM_RIGHTS")
    func fileDescriptors() async throws {
        try await Self.withFilter(level: "standard", exportingNotes: false) { _, filter in try await Self.fileDescriptors(filter) }
    }

    static func fileDescriptors(_ filter: $TextFilter) async throws {
        var template = Array("/tmp/xsb-actors-XXXXXX".utf8CString)
        let memory = mkstemp(&template)
        try #require(memory >= 0)
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        defer { close(memory) }
        try #require(ftruncate(memory, 4096) == 0)
        #expect(try await filter.size(of: TransferredFileDescriptor(duplicating: memory)) == 4096)
        // The host's own descriptor stays open.
        #expect(fcntl(memory, F_GETFD) >= 0)
        let file = try await filter.file(containing: "from the extension")
        let descriptor = try #require(file.rawValue)
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(descriptor, &buffer, buffer.count)
        #expect(String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self) == "from the extension")
    }

    @Test("the extension killed or crashing mid-call fails the call once, with the reason", arguments: ["kill", "crash"])
    func interruptedMidCall(cause: String) async throws {
        let recorder = Recorder()
        let process = try await AppExtensionProcess(configuration: recorder.configuration(Self.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        let filter = try connection.remoteObject($TextFilter.self)
        let call = Task { () throws -> Void in
            if cause == "kill" { _ = try await filter.sleep(milliseconds: 60_000) } else { try await filter.crash() }
        }
        if cause == "kill" {
            try await Task.sleep(for: .milliseconds(200))
            kill(process.sandbox.pid, SIGKILL)
        }
        do {
            try await call.value
            Issue.record("the call returned")
        } catch ExtensionError.interrupted(let termination) {
            #expect(cause == "kill" ? termination == .killed : "\(termination)".contains("signal 11"), "\(termination)")
        } catch {
            Issue.record("expected interrupted, got \(error)")
        }
        #expect(await HostFixtures.eventually { recorder.recordedInterruptions.count == 1 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(recorder.recordedInterruptions.count == 1, "\(recorder.recordedInterruptions)")
        // Later calls on that connection fail at once with the same reason.
        await #expect(throws: ExtensionError.self) { _ = try await filter.apply("late", options: FilterOptions()) }
    }
}
