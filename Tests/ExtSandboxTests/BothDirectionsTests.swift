import ExtSandbox
import Foundation
import Glibc
import Synchronization
import Testing

/// REQUEST and ONEWAY go both ways (docs/wire-protocol.md §3): the extension calls its host.
@Suite("Extension to host: requests and one-way messages")
struct BothDirectionsTests {
    final class Seen: Sendable {
        let oneWays = Mutex<[String]>([])
        let cancelledHandlers = Atomic<Int>(0)
    }

    static func handlers(_ seen: Seen) -> ExtensionConnection.Handlers {
        ExtensionConnection.Handlers(
            onRequest: { message in
                let text = HostFixtures.text(message)
                switch text {
                case "slow":
                    do { try await Task.sleep(for: .seconds(60)) } catch { seen.cancelledHandlers.add(1, ordering: .relaxed); throw error }
                    return HostFixtures.message("slept")
                case "refuse":
                    throw ExtensionConnection.ExtensionFailure(code: 150, "refused by the host")
                default:
                    return HostFixtures.message("host:" + text)
                }
            },
            onOneWay: { message in seen.oneWays.withLock { $0.append(HostFixtures.text(message)) } })
    }

    @TaskLocal static var callerMark: String?

    @Test("the extension's request runs without the calling task's task-local values, even when the caller reads it")
    func handlersDoNotInheritTheCallersContext() async throws {
        let seen = Mutex<[String?]>([])
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(level: "hardened")))
        defer { process.invalidate() }
        let connection = try await process.makeConnection(handlers: ExtensionConnection.Handlers(onRequest: { message in
            seen.withLock { $0.append(Self.callerMark) }
            return HostFixtures.message("host:" + HostFixtures.text(message))
        }))
        defer { connection.invalidate() }
        // The extension asks the host before it answers: its request arrives while the caller
        // looks for the reply on its own thread, which then reads (and dispatches) it.
        let replies = try await Self.$callerMark.withValue("the caller's") { () async throws -> [String] in
            var replies: [String] = []
            for _ in 0..<5 { replies.append(HostFixtures.text(try await connection.send(HostFixtures.message("ask-host ping")))) }
            return replies
        }
        #expect(replies == [String](repeating: "host said: host:ping", count: 5))
        #expect(seen.withLock { $0 } == [String?](repeating: nil, count: 5))
    }

    @Test("the host answers the extension's requests and receives its one-way messages")
    func handled() async throws {
        let seen = Seen()
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(level: "hardened")))
        defer { process.invalidate() }
        let connection = try await process.makeConnection(handlers: Self.handlers(seen))
        defer { connection.invalidate() }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("ask-host ping"))) == "host said: host:ping")
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("ask-host refuse"))) == "host error 150")
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("tell-host one"))) == "told")
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("tell-host two"))) == "told")
        #expect(await HostFixtures.eventually { seen.oneWays.withLock { $0 } == ["one", "two"] }, "\(seen.oneWays.withLock { $0 })")
        // Many at once, each answered once, to its own request.
        let replies = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<20 {
                group.addTask { HostFixtures.text(try await connection.send(HostFixtures.message("ask-host n\(index)"))) == "host said: host:n\(index)" }
            }
            return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(replies == 20)
    }

    @Test("the extension cancels its request: the host's handler is cancelled, the extension hears it")
    func cancellation() async throws {
        let seen = Seen()
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection(handlers: Self.handlers(seen))
        defer { connection.invalidate() }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("ask-host-cancel"))) == "cancelled")
        #expect(await HostFixtures.eventually { seen.cancelledHandlers.load(ordering: .relaxed) == 1 })
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("ask-host after"))) == "host said: host:after")
    }

    @Test("with no handler a request gets ERROR 2 and a one-way message is dropped; the connection carries on")
    func noHandler() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("ask-host ping"))) == "host error 2")
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("tell-host dropped"))) == "told")
        #expect(connection.isOpen)
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("still"))) == "still")
    }
}
