import ExtSandboxWire
import Glibc
import Testing
import TestSupport

/// A `FrameSocket` owns its descriptor (a `FileDescriptor`) and closes it exactly once; its two
/// directions never close it.
///
/// A number is reused on purpose (dup2) only in a child process: in this one, other suites open
/// and close descriptors at the same time.
@Suite("Socket ownership")
struct SocketOwnershipTests {
    @Test("close() closes the socket once: the peer sees its end, and a second close() and the deinit leave the reused number alone", .oneExitTestAtATime)
    func closesOnce() async {
        await #expect(processExitsWith: .success) {
            guard let (x, y) = try? FrameSocket.makeSocketPair(nonBlocking: true) else { exit(2) }
            let number = x.rawValue
            var socket: FrameSocket? = FrameSocket(descriptor: x)
            let peer = FrameSocket(descriptor: y)
            socket?.close()
            // Not leaked: the peer reads the end of the stream (a socket left open would block).
            guard case .closed? = try? peer.tryReceive() else { exit(3) }
            guard socket?.descriptor == nil, !x.isOpen else { exit(4) }
            // The number goes to a pipe of this test's; nothing of the socket may close it now.
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0, dup2(ends[0], number) == number else { exit(5) }
            socket?.close()
            socket = nil
            x.close()
            exit(fcntl(number, F_GETFD) >= 0 ? 0 : 1)
        }
    }

    @Test("the sending and receiving directions use the socket but never close it, detached or released")
    func directionsDoNotClose() throws {
        let (x, y) = try FrameSocket.makeSocketPair()
        var before = stat()
        try #require(fstat(x.rawValue, &before) == 0)
        do {
            let sender = FrameSender(descriptor: x)
            let receiver = FrameReceiver(descriptor: x)
            try sender.send(.goodbye)
            sender.detach()
            receiver.detach()
            #expect(sender.descriptor == nil && receiver.descriptor == nil)
            #expect(throws: WireError.connectionClosed) { try sender.send(.goodbye) }
        }
        var after = stat()
        #expect(x.isOpen)
        #expect(fstat(x.rawValue, &after) == 0 && after.st_ino == before.st_ino)
        let peer = FrameSocket(descriptor: y)
        #expect(try peer.receive() == .goodbye)
        x.close()
        #expect(try peer.receive() == nil)
    }
}
