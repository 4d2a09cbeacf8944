import ExtSandboxWire
import Glibc
import Synchronization

/// One socket pair made ahead for the next connection to any extension of this host.
///
/// A socketpair costs about a sixth of a connection's set-up; made when a process starts and
/// whenever a connection closes, it costs the next connection nothing (on one CPU, made while
/// the extension takes a connection, it delayed the extension as much). One for the whole host, not one per process: a
/// spare per extension held two fds per running extension (issue 14: fds per extension).
enum SpareSocketPair {
    private static let spare = Mutex<(host: FileDescriptor, extension: FileDescriptor)?>(nil)

    /// The spare pair, or a new one: the caller's, each closed by its last holder.
    static func take() throws(WireError) -> (host: FileDescriptor, extension: FileDescriptor) {
        if let pair = spare.withLock({ $0.take() }) { return (pair.host, pair.extension) }
        return try FrameSocket.makeSocketPair()
    }

    /// Makes the spare pair unless there is one. Best effort: without one, the next connection
    /// makes its own.
    static func prepare() {
        guard spare.withLock({ $0 == nil }), let pair = try? FrameSocket.makeSocketPair() else { return }
        let unused = spare.withLock { spare -> (FileDescriptor, FileDescriptor)? in
            guard spare == nil else { return pair }
            spare = (pair.0, pair.1)
            return nil
        }
        if let unused {
            unused.0.close()
            unused.1.close()
        }
    }
}
