#if canImport(Glibc)
import Glibc
#endif
import SandboxSystem

/// Frames over a connected `AF_UNIX` `SOCK_STREAM` socket, with file descriptors as `SCM_RIGHTS`.
///
/// Works on blocking and non-blocking sockets alike:
/// - ``send(_:)`` and ``receive()`` block until done (on a non-blocking socket they `poll` when the
///   kernel says `EAGAIN`);
/// - ``enqueue(_:)`` and ``flush()`` never block; nor does ``tryReceive()`` on a non-blocking
///   socket (for an event loop: call ``flush()`` when the socket is writable, ``tryReceive()``
///   until it reports ``ReceiveResult/wouldBlock`` when it is readable);
/// - ``receiveNext(wait:)`` serves loops that alternate between reading and other work, and
///   saves them the `recvmsg` that would only say `EAGAIN`.
///
/// A `FrameSocket` owns its descriptor and closes it (once) in ``close()`` or when it is released. It is
/// not thread-safe. Its two directions are a ``FrameSender`` and a ``FrameReceiver``: a connection
/// whose directions are used by different threads holds those two itself (each owned by its own
/// lock or thread, which the compiler then checks) rather than one `FrameSocket`. After any error other than
/// ``WireError/systemCall(_:errno:)`` from a send, the connection is unusable: close it.
public final class FrameSocket {
    /// What ``tryReceive()`` found.
    public enum ReceiveResult: Sendable {
        /// A whole frame (its fds are the caller's).
        case frame(Frame)
        /// No whole frame yet; wait until the socket is readable.
        case wouldBlock
        /// The peer closed the connection at a frame boundary.
        case closed
    }

    /// Largest size of the receive buffer: one `recvmsg` reads at most this much (except for
    /// large payloads, which are read directly into the frame's buffer).
    public static let receiveBufferSize = 64 * 1024

    /// Size of a new receiver's buffer. It grows to ``receiveBufferSize`` the first time a read
    /// fills it (the peer sends faster than it is read): an idle socket (an extension's control
    /// socket, a connection that carries small requests) costs its host one page, not 64 KiB
    /// (issue 14: the host's memory per running extension).
    public static let initialReceiveBufferSize = 4 * 1024

    /// Payloads with at least this many bytes still missing are read straight into the frame.
    static let directReadThreshold = 16 * 1024

    /// `CMSG_SPACE(16 * sizeof(int))` on Linux: a 16-byte `cmsghdr` plus 64 bytes of fds (a
    /// sender's: it attaches at most one frame's fds).
    static let controlBufferSize = cmsgSpace(ExtSandboxWire.maximumFDsPerFrame * MemoryLayout<Int32>.size)

    /// The most fds one `sendmsg` can pass (the kernel's `SCM_MAX_FD`).
    static let maximumFDsPerMessage = 253

    /// Room for every fd one `recvmsg` can bring: a 16-byte `cmsghdr` plus 253 fds, not just the
    /// 16 a frame may carry. The fds that do not fit are released by the kernel in the receiving
    /// thread, where their last close can be made to block; received, the decoder refuses them
    /// (more than a frame carries) and closes them (with ``UntrustedDescriptors/close(_:)`` when
    /// the peer is not trusted).
    static let receiveControlBufferSize = cmsgSpace(maximumFDsPerMessage * MemoryLayout<Int32>.size)


    /// The socket, owned by this object; nil once closed. Its number is for system calls
    /// (`poll`, `epoll_ctl`) while it is open; ``close()`` closes it.
    public private(set) var descriptor: FileDescriptor?
    private let sender: FrameSender
    private let receiver: FrameReceiver
    /// Whether ``close()`` hands the socket to ``UntrustedDescriptors/close(_:)``.
    private let untrustedPeer: Bool

    /// Encodes outgoing frames; set its ``FrameEncoder/maximumFrameSize`` to the peer's maximum
    /// (from its HELLO).
    public var encoder: FrameEncoder {
        get { sender.encoder }
        set { sender.encoder = newValue }
    }
    /// Decodes incoming frames; its ``FrameDecoder/maximumFrameSize`` is this side's maximum.
    public var decoder: FrameDecoder { receiver.decoder }

    /// Wraps a connected stream socket, taking ownership of `descriptor` (this object closes it:
    /// its other holders must not).
    /// - Parameters:
    ///   - maximumFrameSize: the largest frame this side accepts (advertise it in your HELLO).
    ///   - peerMaximumFrameSize: the largest frame the peer accepts (update ``encoder`` once its
    ///     HELLO is known).
    ///   - untrustedPeer: the peer is not trusted: the fds it sent and the socket drops are
    ///     closed with ``UntrustedDescriptors/close(_:)``, and so is the socket itself by
    ///     ``close()`` (and the deinit), as its last close releases the fds the peer sent that
    ///     nobody read.
    public init(descriptor: FileDescriptor,
                maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize,
                peerMaximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize,
                untrustedPeer: Bool = false) {
        self.descriptor = descriptor
        self.untrustedPeer = untrustedPeer
        sender = FrameSender(descriptor: descriptor, peerMaximumFrameSize: peerMaximumFrameSize, untrustedPeer: untrustedPeer)
        receiver = FrameReceiver(descriptor: descriptor, maximumFrameSize: maximumFrameSize, untrustedPeer: untrustedPeer)
    }

    /// Wraps the connected stream socket numbered `descriptor`, taking ownership of the number:
    /// for one the process was given rather than opened (an extension's control socket, fd 3).
    /// - Precondition: `descriptor` is not negative.
    public convenience init(descriptor: Int32,
                            maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize,
                            peerMaximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize) {
        guard let owned = FileDescriptor(adopting: descriptor) else {
            preconditionFailure("FrameSocket: \(descriptor) is not a file descriptor")
        }
        self.init(descriptor: owned, maximumFrameSize: maximumFrameSize, peerMaximumFrameSize: peerMaximumFrameSize)
    }

    deinit {
        close()
    }

    /// Closes the socket (once) and every fd the decoder or the send queue still holds.
    public func close() {
        sender.detach()
        receiver.detach()
        if untrustedPeer {
            if let number = descriptor?.release() { UntrustedDescriptors.close([number]) }
        } else {
            descriptor?.close()
        }
        descriptor = nil
    }

    /// `shutdown(SHUT_WR)`: the peer reads end of stream after the frames already sent.
    public func shutdownWrite() throws(WireError) {
        guard let descriptor else { throw .connectionClosed }
        if Glibc.shutdown(descriptor.rawValue, Int32(SHUT_WR)) != 0 { throw .systemCall("shutdown", errno: errno) }
    }

    /// Sets or clears `O_NONBLOCK`.
    public func setNonBlocking(_ nonBlocking: Bool) throws(WireError) {
        guard let descriptor else { throw .connectionClosed }
        let flags = fcntl(descriptor.rawValue, F_GETFL)
        guard flags >= 0 else { throw .systemCall("fcntl", errno: errno) }
        let new = nonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        if new != flags, fcntl(descriptor.rawValue, F_SETFL, new) != 0 { throw .systemCall("fcntl", errno: errno) }
    }

    /// A connected pair of `AF_UNIX` `SOCK_STREAM` sockets with `SOCK_CLOEXEC`, each closed by
    /// its last holder (or handed on with `release()`).
    public static func makeSocketPair(nonBlocking: Bool = false) throws(WireError) -> (FileDescriptor, FileDescriptor) {
        var fds: (Int32, Int32) = (0, 0)
        var type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        let made = withUnsafeMutableBytes(of: &fds) { socketpair(AF_UNIX, type, 0, $0.baseAddress!.assumingMemoryBound(to: Int32.self)) }
        guard made == 0, let first = FileDescriptor(adopting: fds.0), let second = FileDescriptor(adopting: fds.1) else {
            throw .systemCall("socketpair", errno: errno)
        }
        return (first, second)
    }

    /// Two `FrameSocket`s over a new socket pair.
    public static func makePair(maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize)
        throws(WireError) -> (FrameSocket, FrameSocket) {
        let (a, b) = try makeSocketPair()
        return (FrameSocket(descriptor: a, maximumFrameSize: maximumFrameSize, peerMaximumFrameSize: maximumFrameSize),
                FrameSocket(descriptor: b, maximumFrameSize: maximumFrameSize, peerMaximumFrameSize: maximumFrameSize))
    }

    // MARK: Sending (``FrameSender``)

    /// Sends `frame` whole, blocking until every byte is written (after any frames still queued by
    /// ``enqueue(_:)``). Its fds travel with the first byte; they stay the caller's (see ``Frame``).
    public func send(_ frame: Frame) throws(WireError) { try sender.send(frame) }

    /// Queues `frame` for ``flush()`` and tries to write it now, without blocking (`MSG_DONTWAIT`,
    /// whatever the socket's mode). Takes ownership of its fds: they are closed once written, or
    /// when the socket closes.
    public func enqueue(_ frame: Frame) throws(WireError) { try sender.enqueue(frame) }

    /// Removes a queued frame of `kind` and `id` of which nothing has been written yet, closing
    /// its fds. Returns whether there was one.
    public func removeUnsent(kind: FrameKind, id: UInt64) -> Bool { sender.removeUnsent(kind: kind, id: id) }

    /// Whether frames queued by ``enqueue(_:)`` are still (partly) unwritten.
    public var hasPendingOutput: Bool { sender.hasPendingOutput }
    /// Bytes of frames queued by ``enqueue(_:)`` and not yet written.
    public var pendingOutputBytes: Int { sender.pendingOutputBytes }
    /// File descriptors of queued frames whose first byte has not been written yet.
    public var pendingOutputFDs: Int { sender.pendingOutputFDs }

    /// Writes queued frames until done or the socket would block. Returns `true` when the queue is
    /// empty. Never blocks (`MSG_DONTWAIT`).
    @discardableResult
    public func flush() throws(WireError) -> Bool { try sender.flush() }

    // MARK: Receiving (``FrameReceiver``)

    /// Receives the next frame, blocking until it is complete (``FrameReceiver/receive()``).
    public func receive() throws(WireError) -> Frame? { try receiver.receive() }

    /// Whether bytes already read from the socket wait in this object's buffer (a poll of the
    /// descriptor does not see them).
    public var hasBufferedInput: Bool { receiver.hasBufferedInput }

    /// Receives the next frame if the bytes for it are available (``FrameReceiver/tryReceive()``).
    public func tryReceive() throws(WireError) -> ReceiveResult { try receiver.tryReceive() }

    /// The next frame, for loops that read until the socket is empty and then do something else
    /// (``FrameReceiver/receiveNext(wait:)``).
    public func receiveNext(wait: Bool) throws(WireError) -> ReceiveResult { try receiver.receiveNext(wait: wait) }
}

/// Waits until `descriptor` is ready for `events` (for a blocking send or receive on a
/// non-blocking socket).
func waitUntilReady(_ descriptor: FileDescriptor?, for events: Int16) throws(WireError) {
    guard let descriptor else { throw .connectionClosed }
    var entry = pollfd(fd: descriptor.rawValue, events: events, revents: 0)
    guard retryingInterrupts({ poll(&entry, 1, -1) }) >= 0 else { throw .systemCall("poll", errno: errno) }
}

/// One `recvmsg(2)` with `MSG_CMSG_CLOEXEC` (and `flags`) into `buffer`, its ancillary data into
/// `control`. Returns the byte count (-1 with `errno` set on failure; `EINTR` is retried), the fds
/// of its `SCM_RIGHTS` messages, and whether the kernel truncated the ancillary data
/// (`MSG_CTRUNC`; the fds that did arrive are returned all the same).
func receiveWithDescriptors(from socket: Int32, into buffer: UnsafeMutableRawBufferPointer,
                            control: UnsafeMutableRawBufferPointer, flags: Int32) -> (count: Int, fds: [Int32], truncated: Bool) {
    var iov = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
    var message = msghdr()
    let n: Int = withUnsafeMutablePointer(to: &iov) { iovPointer in
        message.msg_iov = iovPointer
        message.msg_iovlen = 1
        message.msg_control = control.baseAddress
        message.msg_controllen = control.count
        return retryingInterrupts { recvmsg(socket, &message, Int32(MSG_CMSG_CLOEXEC) | flags) }
    }
    guard n >= 0 else { return (n, [], false) }
    var fds: [Int32] = []
    // Walk the cmsghdrs: CMSG_FIRSTHDR / CMSG_NXTHDR with 8-byte alignment.
    let controlLength = min(message.msg_controllen, control.count)
    var offset = 0
    while offset + cmsgHeaderSize <= controlLength {
        let length = control.loadUnaligned(fromByteOffset: offset, as: Int.self)
        let level = control.loadUnaligned(fromByteOffset: offset + 8, as: Int32.self)
        let type = control.loadUnaligned(fromByteOffset: offset + 12, as: Int32.self)
        guard length >= cmsgHeaderSize, offset + length <= controlLength else { break }
        if level == SOL_SOCKET, type == Int32(SCM_RIGHTS) {
            let count = (length - cmsgHeaderSize) / MemoryLayout<Int32>.size
            for index in 0..<count {
                fds.append(control.loadUnaligned(fromByteOffset: offset + cmsgHeaderSize + index * MemoryLayout<Int32>.size, as: Int32.self))
            }
        }
        offset += cmsgAlign(length)
    }
    return (n, fds, message.msg_flags & Int32(MSG_CTRUNC) != 0)
}

// MARK: - cmsg arithmetic (Linux, 64-bit: cmsghdr is { size_t len; int level; int type; })

let cmsgHeaderSize = MemoryLayout<cmsghdr>.size  // 16
@inline(__always) func cmsgAlign(_ length: Int) -> Int {
    (length + MemoryLayout<Int>.size - 1) & ~(MemoryLayout<Int>.size - 1)
}
@inline(__always) func cmsgLength(_ dataLength: Int) -> Int { cmsgAlign(cmsgHeaderSize) + dataLength }
@inline(__always) func cmsgSpace(_ dataLength: Int) -> Int { cmsgAlign(cmsgHeaderSize) + cmsgAlign(dataLength) }
