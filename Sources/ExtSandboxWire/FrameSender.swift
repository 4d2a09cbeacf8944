#if canImport(Glibc)
import Glibc
#endif
import SandboxSystem

/// The sending direction of a frame socket: the encoder, the queue of ``enqueue(_:)`` and the
/// `sendmsg` ancillary buffer, and nothing the receiving direction uses.
///
/// ``FrameSocket`` holds one; a connection whose two directions are used by different threads
/// (each under its own lock, say) makes one of its own with ``init(descriptor:peerMaximumFrameSize:)``
/// beside a ``FrameReceiver``, so that the compiler sees two separately owned values. It does not
/// own the descriptor: its owner calls ``detach()`` before closing it.
public final class FrameSender {
    /// The socket (its owner's: this object never closes it); nil once detached.
    public private(set) var descriptor: FileDescriptor?
    /// Encodes outgoing frames; set its ``FrameEncoder/maximumFrameSize`` to the peer's maximum
    /// (from its HELLO).
    public var encoder: FrameEncoder
    /// Ancillary data of `sendmsg`.
    private let sendControlBuffer: UnsafeMutableRawBufferPointer

    private struct Outgoing {
        var header: [UInt8]
        var frame: Frame
        var sent: Int
        var total: Int { header.count + frame.payloadCount }
    }
    private var queue: [Outgoing] = []
    private var queueHead = 0
    /// Bytes of frames queued by ``enqueue(_:)`` and not yet written (partly written ones count
    /// what is left).
    public private(set) var pendingOutputBytes = 0
    /// File descriptors of queued frames whose first byte has not been written yet (they are
    /// held, and closed once written).
    public private(set) var pendingOutputFDs = 0

    /// Whether the fds of frames it drops unsent are closed on the closing threads
    /// (`UntrustedDescriptors.closeOffThread`).
    private let untrustedPeer: Bool
    /// Whether a send whose fds the kernel refuses for now is retried (``init(descriptor:peerMaximumFrameSize:untrustedPeer:waitsForDescriptorRoom:)``).
    private let waitsForDescriptorRoom: Bool

    /// Sends on `descriptor` (a connected stream socket that stays its owner's).
    /// - Parameters:
    ///   - peerMaximumFrameSize: the largest frame the peer accepts (update ``encoder`` once its
    ///     HELLO is known).
    ///   - untrustedPeer: the fds of frames dropped unsent are closed on the closing threads,
    ///     each its own way (`UntrustedDescriptors.closeOffThread`): the peer may have
    ///     queued descriptors in one whose last reference this is.
    ///   - waitsForDescriptorRoom: a frame with fds that the kernel refuses for now
    ///     (`ETOOMANYREFS`: the sending user has as many fds in flight as its fd limit, which
    ///     another process of the same user can cause, such as another extension running as the
    ///     same host uid) is tried again for up to a second, sleeping between tries, in the
    ///     caller's thread. Only for a sender whose waiting delays nobody else (an extension's own
    ///     requests); a host fails the send at once instead.
    public init(descriptor: FileDescriptor, peerMaximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize,
                untrustedPeer: Bool = false, waitsForDescriptorRoom: Bool = false) {
        self.descriptor = descriptor
        self.untrustedPeer = untrustedPeer
        self.waitsForDescriptorRoom = waitsForDescriptorRoom
        encoder = FrameEncoder(maximumFrameSize: peerMaximumFrameSize)
        sendControlBuffer = .allocate(byteCount: FrameSocket.controlBufferSize, alignment: 16)
    }

    deinit {
        detach()
        sendControlBuffer.deallocate()
    }

    /// Stops using the descriptor (before its owner closes it) and closes the fds of the frames
    /// still queued. Later sends throw ``WireError/connectionClosed``.
    ///
    /// With `untrustedPeer`, fds never sent are closed on the closing threads (here, in
    /// ``removeUnsent(kind:id:)`` and when ``enqueue(_:)`` fails; see `closeUnsent`). A
    /// frame's fds once it is written are closed at once: the kernel holds them in flight.
    public func detach() {
        descriptor = nil
        for item in queue[queueHead...] { closeUnsent(item.frame) }
        queue = []
        queueHead = 0
        pendingOutputBytes = 0
        pendingOutputFDs = 0
    }

    /// Sends `frame` whole, blocking until every byte is written (after any frames still queued by
    /// ``enqueue(_:)``). Its fds travel with the first byte; they stay the caller's (see ``Frame``).
    public func send(_ frame: Frame) throws(WireError) {
        let header = try encoder.validate(frame)
        guard descriptor != nil else { throw .connectionClosed }
        while !(try flush()) { try waitUntilReady(descriptor, for: Int16(POLLOUT)) }
        // 20 bytes of prefix and header on the stack.
        var headerStorage: (UInt64, UInt64, UInt32) = (0, 0, 0)
        try withUnsafeMutableBytes(of: &headerStorage) { raw in
            header.encode(into: raw)
            let headerBytes = UnsafeRawBufferPointer(rebasing: raw[..<FrameHeader.encodedSize])
            return frame.withPayloadBytes { payload, tail in
                Result { () throws(WireError) in
                    var sent = 0
                    let total = FrameHeader.encodedSize + payload.count + tail.count
                    while sent < total {
                        let n = try write(header: headerBytes, payload: payload, tail: tail, fds: sent == 0 ? frame.fdNumbers : [], from: sent, flags: 0)
                        if n < 0 { try waitUntilReady(descriptor, for: Int16(POLLOUT)) } else { sent += n }
                    }
                }
            }
        }.get()
    }

    /// Queues `frame` for ``flush()`` and tries to write it now, without blocking (`MSG_DONTWAIT`,
    /// whatever the socket's mode). Takes ownership of its fds: they are closed once written, or
    /// when the socket closes.
    public func enqueue(_ frame: Frame) throws(WireError) {
        let header: FrameHeader
        do { header = try encoder.validate(frame) } catch {
            closeUnsent(frame)
            throw error
        }
        guard descriptor != nil else {
            closeUnsent(frame)
            throw .connectionClosed
        }
        var sent = 0
        let writeNow = queueHead == queue.count
        if writeNow {
            // Nothing queued before it: one `sendmsg` from a header on the stack, and nothing is
            // queued (or allocated) when it goes out whole, which is the usual case.
            var headerStorage: (UInt64, UInt64, UInt32) = (0, 0, 0)
            let attempt = withUnsafeMutableBytes(of: &headerStorage) { raw in
                header.encode(into: raw)
                let headerBytes = UnsafeRawBufferPointer(rebasing: raw[..<FrameHeader.encodedSize])
                return frame.withPayloadBytes { payload, tail in
                    Result { () throws(WireError) in
                        try write(header: headerBytes, payload: payload, tail: tail, fds: frame.fdNumbers, from: 0, flags: Int32(MSG_DONTWAIT))
                    }
                }
            }
            let written: Int
            do { written = try attempt.get() } catch {
                closeUnsent(frame)
                throw error
            }
            if written == FrameHeader.encodedSize + frame.payloadCount {
                frame.closeFDs()
                return
            }
            sent = max(written, 0)
        }
        var bytes = [UInt8](repeating: 0, count: FrameHeader.encodedSize)
        bytes.withUnsafeMutableBytes { header.encode(into: $0) }
        queue.append(Outgoing(header: bytes, frame: frame, sent: sent))
        pendingOutputBytes += FrameHeader.encodedSize + frame.payloadCount - sent
        if sent == 0 { pendingOutputFDs += frame.fds.count }
        // (When it was just tried, the socket is full: wait for writability.)
        if !writeNow { _ = try flush() }
    }

    /// Removes a queued frame of `kind` and `id` of which nothing has been written yet, closing
    /// its fds (for a request cancelled before it went out: the peer never sees it). Returns
    /// whether there was one.
    public func removeUnsent(kind: FrameKind, id: UInt64) -> Bool {
        guard let index = queue[queueHead...].firstIndex(where: { $0.sent == 0 && $0.frame.kind == kind && $0.frame.id == id }) else {
            return false
        }
        let item = queue.remove(at: index)
        pendingOutputBytes -= item.total
        pendingOutputFDs -= item.frame.fds.count
        closeUnsent(item.frame)
        return true
    }

    /// Closes the fds of a frame that will not be written, each its own way. They are the
    /// sender's own (a host sends `dup`s of its caller's descriptors), so nothing is shut down or
    /// made non-lingering: that would act on the socket the caller still uses. For an untrusted
    /// peer's socket the closes run on the closing threads: with the caller's original gone, a
    /// copy is the last reference, and the last close of a Unix socket releases in the closing
    /// thread what was queued in it, which the peer may have put there (through another end the
    /// caller sent it).
    private func closeUnsent(_ frame: Frame) {
        if untrustedPeer {
            UntrustedDescriptors.closeOffThread(frame.fds)
        } else {
            frame.closeFDs()
        }
    }

    /// Whether frames queued by ``enqueue(_:)`` are still (partly) unwritten.
    public var hasPendingOutput: Bool { queueHead < queue.count }

    /// Writes queued frames until done or the socket would block. Returns `true` when the queue is
    /// empty. Never blocks (`MSG_DONTWAIT`).
    @discardableResult
    public func flush() throws(WireError) -> Bool {
        while queueHead < queue.count {
            guard descriptor != nil else { throw .connectionClosed }
            let item = queue[queueHead]
            let n = try item.header.withUnsafeBytes { header in
                item.frame.withPayloadBytes { payload, tail in
                    Result { () throws(WireError) in
                        try write(header: header, payload: payload, tail: tail, fds: item.sent == 0 ? item.frame.fdNumbers : [], from: item.sent,
                                  flags: Int32(MSG_DONTWAIT))
                    }
                }
            }.get()
            if n < 0 { return false }
            queue[queueHead].sent += n
            pendingOutputBytes -= n
            if item.sent == 0 && n > 0 { pendingOutputFDs -= item.frame.fds.count }
            if queue[queueHead].sent == item.total {
                item.frame.closeFDs()
                queueHead += 1
            }
        }
        queue.removeAll(keepingCapacity: true)
        queueHead = 0
        pendingOutputBytes = 0
        pendingOutputFDs = 0
        return true
    }

    /// One `sendmsg` of the frame's bytes (header, payload, payload tail) from offset `sent` (fds
    /// attached when given). Returns the bytes written, or -1 for `EAGAIN`.
    private func write(header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, tail: UnsafeRawBufferPointer, fds: [Int32],
                       from sent: Int, flags: Int32) throws(WireError) -> Int {
        guard let socket = descriptor?.rawValue else { throw .connectionClosed }
        var iov = (iovec(), iovec(), iovec())
        var iovCount = 0
        withUnsafeMutableBytes(of: &iov) { raw in
            let iovs = raw.bindMemory(to: iovec.self)
            var skip = sent
            for part in [header, payload, tail] {
                guard skip < part.count else {
                    skip -= part.count
                    continue
                }
                iovs[iovCount] = iovec(iov_base: UnsafeMutableRawPointer(mutating: part.baseAddress! + skip), iov_len: part.count - skip)
                iovCount += 1
                skip = 0
            }
        }
        let control = sendControlBuffer
        var result = -1
        for attempt in 0..<1_000 {
            if attempt > 0 { usleep(1_000) }
            result = sendOnce(&iov, iovCount: iovCount, fds: fds, control: control, socket: socket, flags: flags)
            guard result < 0, errno == ETOOMANYREFS, !fds.isEmpty, waitsForDescriptorRoom else { break }
        }
        if result >= 0 { return result }
        switch errno {
        case EAGAIN, EWOULDBLOCK: return -1
        case EPIPE, ECONNRESET: throw .connectionClosed
        case let code: throw .systemCall("sendmsg", errno: code)
        }
    }

    /// One `sendmsg` of the iovecs in `iov` with `fds` attached (none: no ancillary data).
    private func sendOnce(_ iov: inout (iovec, iovec, iovec), iovCount: Int, fds: [Int32], control: UnsafeMutableRawBufferPointer,
                          socket: Int32, flags: Int32) -> Int {
        withUnsafeMutablePointer(to: &iov) { iovPointer in
            iovPointer.withMemoryRebound(to: iovec.self, capacity: 3) { iovs in
                var message = msghdr()
                message.msg_iov = iovs
                message.msg_iovlen = iovCount
                if !fds.isEmpty {
                    let dataBytes = fds.count * MemoryLayout<Int32>.size
                    let space = cmsgSpace(dataBytes)
                    control.baseAddress!.initializeMemory(as: UInt8.self, repeating: 0, count: space)
                    control.storeBytes(of: cmsgLength(dataBytes), toByteOffset: 0, as: Int.self)   // cmsg_len
                    control.storeBytes(of: SOL_SOCKET, toByteOffset: 8, as: Int32.self)            // cmsg_level
                    control.storeBytes(of: Int32(SCM_RIGHTS), toByteOffset: 12, as: Int32.self)    // cmsg_type
                    fds.withUnsafeBytes { source in
                        (control.baseAddress! + cmsgHeaderSize).copyMemory(from: source.baseAddress!, byteCount: dataBytes)
                    }
                    message.msg_control = control.baseAddress
                    message.msg_controllen = space
                }
                return retryingInterrupts { sendmsg(socket, &message, Int32(MSG_NOSIGNAL) | flags) }
            }
        }
    }
}

extension Frame {
    /// The payload and its tail as raw bytes (empty buffers have no base address).
    func withPayloadBytes<Result>(_ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Result) -> Result {
        payload.withUnsafeBytes { payload in payloadTail.withUnsafeBytes { tail in body(payload, tail) } }
    }
}
