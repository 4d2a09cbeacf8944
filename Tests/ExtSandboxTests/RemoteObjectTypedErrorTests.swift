import Glibc
import SandboxRuntime
import SandboxSystem
import Testing
import TextFilterContract
@testable import ExtSandbox

/// ``ExtensionConnection/remoteObject(_:)`` declares what it throws (`DistributedCallError`, of
/// the same family as its proxy's calls): the `catch` below names a case of it, which compiles
/// only because the thrown type is known, not recovered with a cast.
@Suite("A host connection's proxy, typed")
struct RemoteObjectTypedErrorTests {
    @Test("the proxy stands for the extension's exported object, its error typed")
    func proxyMadeWithItsErrorTyped() throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { close(pair[1]) }
        let descriptor = try #require(FileDescriptor(adopting: pair[0]))
        let connection = ExtensionConnection(descriptor: descriptor, monitor: Supervisor.shared.monitor, name: "host", onClose: {})
        defer { connection.invalidate() }
        do {
            let filter = try connection.remoteObject($TextFilter.self)
            #expect(filter.id == ExtensionActorID.extension)
        } catch .notSent(let why) {
            Issue.record("no proxy: \(why)")
        } catch {
            Issue.record("no proxy: \(error)")
        }
    }
}
