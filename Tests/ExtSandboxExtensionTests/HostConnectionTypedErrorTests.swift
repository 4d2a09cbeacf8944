import ExtSandboxActors
import Glibc
import SandboxSystem
import Testing
@testable import ExtSandboxExtension

/// The extension's side of a connection declares what its sends and its call serving throw
/// (`HostRequestError`, `ExtensionFailure`): the `catch` clauses below name a case or read a
/// field, which compiles only because the thrown type is known, not recovered with a cast.
@Suite("The extension's connection to the host, typed")
struct HostConnectionTypedErrorTests {
    /// A connection whose socket's peer (the host's end) is already closed.
    static func connectionToAClosedHost() throws -> HostConnection {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        close(pair[1])
        let descriptor = try #require(FileDescriptor(adopting: pair[0]))
        return HostConnection(writer: ConnectionWriter(descriptor: descriptor))
    }

    @Test("a one-way message to a host that is gone throws connectionClosed")
    func oneWayToAClosedHost() throws {
        let connection = try Self.connectionToAClosedHost()
        do {
            try connection.sendOneWay(Message([1, 2, 3]))
            Issue.record("a message was sent to a closed socket")
        } catch .connectionClosed {
        } catch {
            Issue.record("not connectionClosed: \(error)")
        }
    }

    /// The case a failed request names, read by a switch over every case of `HostRequestError`
    /// (it compiles only while `send` and `call` throw that type).
    static func caseName(_ error: HostRequestError) -> String {
        switch error {
        case .remote: "remote"
        case .connectionClosed: "connectionClosed"
        case .messageTooLarge: "messageTooLarge"
        case .cancelled: "cancelled"
        }
    }

    /// Runs `request`, which must fail with `connectionClosed`: typed as `HostRequestError`, so
    /// only a `send` or `call` that throws that type compiles in it.
    static func expectConnectionClosed(_ request: () async throws(HostRequestError) -> Void) async {
        do {
            try await request()
            Issue.record("a closed socket answered")
        } catch {
            #expect(caseName(error) == "connectionClosed", "\(error)")
        }
    }

    @Test("a request to a host that is gone throws connectionClosed, typed")
    func requestToAClosedHost() async throws {
        let connection = try Self.connectionToAClosedHost()
        await Self.expectConnectionClosed { () throws(HostRequestError) in _ = try await connection.send(Message([1, 2, 3])) }
    }

    @Test("a distributed call's envelope to a host that is gone throws connectionClosed, typed")
    func callToAClosedHost() async throws {
        let connection = try Self.connectionToAClosedHost()
        await Self.expectConnectionClosed { () throws(HostRequestError) in
            _ = try await connection.call([1, 2, 3], followedBy: [4], fileDescriptors: [])
        }
    }

    @Test("a call that is not a call envelope is answered with the ExtensionFailure of a malformed envelope")
    func malformedCallServed() async throws {
        let connection = try Self.connectionToAClosedHost()
        do {
            _ = try await connection.serveCall(Message([0xff]))
            Issue.record("a byte was served as a call")
        } catch {
            #expect(error.code == CallErrorCode.malformedEnvelope, "\(error.message)")
        }
    }
}

/// A message's descriptors are owned: one nobody takes is closed with the message, one released
/// stays open for its new owner.
@Suite("The SDK's messages own their descriptors")
struct MessageDescriptorTests {
    static func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) >= 0 }

    @Test("a descriptor left in a dropped message is closed; a released one is not")
    func ownedDescriptors() throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        let (kept, dropped) = (ends[0], ends[1])
        do {
            let message = Message([1], fileDescriptors: [try #require(FileDescriptor(adopting: kept)), try #require(FileDescriptor(adopting: dropped))])
            #expect(message.fileDescriptorNumbers == [kept, dropped])
            #expect(message.fileDescriptors[0].release() == kept)
        }
        #expect(Self.isOpen(kept), "the released number is its new owner's")
        #expect(!Self.isOpen(dropped), "the one nobody took went with the message")
        close(kept)
    }
}
