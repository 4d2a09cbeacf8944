import ExtSandbox
import Foundation
import Glibc
import Synchronization
import Testing
import TestSupport

/// What the host receives with a message is owned by the message: a descriptor nobody keeps is
/// closed when the message goes, not left open in the host for its lifetime.
@Suite("Descriptors the host receives")
struct ReceivedDescriptorTests {
    @Test("a reply's descriptor that the caller ignores is closed once the reply goes")
    func ignoredReplyDescriptorIsClosed() async throws {
        let said = Mutex<[String]>([])
        let process = try await AppExtensionProcess(configuration: .init(identity: ChannelTests.pythonIdentity("fd-reply")))
        defer { process.invalidate() }
        let connection = try await process.makeConnection(handlers: .init(onOneWay: { message in
            said.withLock { $0.append(HostFixtures.text(message)) }
        }))
        defer { connection.invalidate() }
        do {
            // The reply carries the write end of the extension's pipe; the caller reads only the bytes.
            let reply = try await connection.send(HostFixtures.message("x"))
            #expect(HostFixtures.text(reply) == "with fd" && reply.fileDescriptors.count == 1)
        }
        // The extension sees end of file on its read end once the host's copy is closed.
        let closed = await HostFixtures.eventually(within: 10) { said.withLock { $0 } == ["closed"] }
        #expect(closed, "the host still holds the reply's descriptor: \(said.withLock { $0 })")
        // (Until it sees the end, the extension waits for it and answers nothing more.)
        guard closed else { return }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("after"))) == "after")
    }
}
