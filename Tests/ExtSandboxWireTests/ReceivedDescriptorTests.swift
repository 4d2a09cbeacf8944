import ExtSandboxWire
import Glibc
import Testing
import TestSupport

/// A received frame owns the descriptors that came with it: those nobody keeps are closed when
/// the frame goes, and each is closed once however many copies of the frame close it.
///
/// A number is reused on purpose (dup2) only in a child process: in this one, other suites open
/// and close descriptors at the same time.
@Suite("Received descriptors")
struct ReceivedDescriptorTests {
    @Test("a received fd that the receiver ignores is closed once its frame goes")
    func ignoredDescriptorIsClosed() throws {
        let (a, b) = try FrameSocket.makePair()
        let probe = Probe()
        defer { probe.dispose() }
        rawSend(a.descriptor!.rawValue, rawFrame(kind: FrameKind.oneway.rawValue, fdCount: 1, payload: [1]), fds: [probe.writeEnd])
        close(probe.writeEnd)
        do {
            let frame = try #require(try b.receive())
            #expect(frame.kind == .oneway && frame.fds.count == 1)
        }
        #expect(probe.becomesClosed, "the frame's copy of the fd outlived the frame")
    }

    @Test("a frame's fds closed from two copies, then dropped, are closed once: the reused number is left alone", .oneExitTestAtATime)
    func closedOnce() async {
        await #expect(processExitsWith: .success) {
            let received = open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard received >= 0 else { exit(2) }
            do {
                var decoder = FrameDecoder()
                guard let frames = try? decoder.append(rawFrame(kind: FrameKind.oneway.rawValue, fdCount: 1), fds: [received]),
                      frames.count == 1 else { exit(3) }
                let copy = frames[0]
                frames[0].closeFDs()
                // The number goes to another owner (as another thread may be given it).
                var ends: [Int32] = [0, 0]
                guard pipe(&ends) == 0, dup2(ends[0], received) == received else { exit(4) }
                copy.closeFDs()
            }
            exit(fcntl(received, F_GETFD) >= 0 ? 0 : 1)
        }
    }
}
