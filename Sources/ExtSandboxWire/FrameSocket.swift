#if canImport(Glibc)
import Glibc
#endif

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
/// A `FrameSocket` owns its descriptor and closes it in ``close()`` or when it is released. It is
/// not thread-safe, except that its two directions keep separate state: one thread (or task) at
/// a time may send (``send(_:)``, ``enqueue(_:)``, ``flush()``, ``encoder``) while one other
/// receives (``receive()``, ``tryReceive()``, ``receiveNext(wait:)``). Everything else, ``close()``
/// above all, wants the socket to itself. After any error other than
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

    /// Size of the receive buffer: one `recvmsg` reads at most this much (except for large
    /// payloads, which are read directly into the frame's buffer).
    public static let receiveBufferSize = 64 * 1024

    /// Payloads with at least this many bytes still missing are read straight into the frame.
    static let directReadThreshold = 16 * 1024

    /// `CMSG_SPACE(16 * sizeof(int))` on Linux: a 16-byte `cmsghdr` plus 64 bytes of fds.
    static let controlBufferSize = cmsgSpace(ExtSandboxWire.maximumFDsPerFrame * MemoryLayout<Int32>.size)

    /// The socket; -1 once closed.
    public private(set) var descriptor: Int32
    /// Encodes outgoing frames; set its ``FrameEncoder/maximumFrameSize`` to the peer's maximum
    /// (from its HELLO).
    public var encoder: FrameEncoder
    /// Decodes incoming frames; its ``FrameDecoder/maximumFrameSize`` is this side's maximum.
    public private(set) var decoder: FrameDecoder

    private let readBuffer: UnsafeMutableRawBufferPointer
    private var readStart = 0
    private var readEnd = 0
    /// Whether the last `recvmsg` returned fewer bytes than it had room for, and no fds: the
    /// socket held nothing more at that moment (see ``receiveNext(wait:)``).
    private var lastReadWasShort = false
    /// Ancillary data of `recvmsg` (receiving side only).
    private let controlBuffer: UnsafeMutableRawBufferPointer
    /// Ancillary data of `sendmsg` (sending side only): the two directions share no buffer.
    private let sendControlBuffer: UnsafeMutableRawBufferPointer

    private struct Outgoing {
        var header: [UInt8]
        var frame: Frame
        var sent: Int
        var total: Int { header.count + frame.payload.count }
    }
    private var queue: [Outgoing] = []
    private var queueHead = 0
    /// Bytes of frames queued by ``enqueue(_:)`` and not yet written (partly written ones count
    /// what is left).
    public private(set) var pendingOutputBytes = 0
    /// File descriptors of queued frames whose first byte has not been written yet (they are
    /// held, and closed once written).
    public private(set) var pendingOutputFDs = 0

    /// Wraps a connected stream socket, taking ownership of `descriptor`.
    /// - Parameters:
    ///   - maximumFrameSize: the largest frame this side accepts (advertise it in your HELLO).
    ///   - peerMaximumFrameSize: the largest frame the peer accepts (update ``encoder`` once its
    ///     HELLO is known).
    public init(descriptor: Int32,
                maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize,
                peerMaximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize) {
        self.descriptor = descriptor
        encoder = FrameEncoder(maximumFrameSize: peerMaximumFrameSize)
        decoder = FrameDecoder(maximumFrameSize: maximumFrameSize)
        readBuffer = .allocate(byteCount: Self.receiveBufferSize, alignment: 16)
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: 2 * Self.controlBufferSize, alignment: 16)
        controlBuffer = UnsafeMutableRawBufferPointer(rebasing: control[..<Self.controlBufferSize])
        sendControlBuffer = UnsafeMutableRawBufferPointer(rebasing: control[Self.controlBufferSize...])
    }

    deinit {
        close()
        readBuffer.deallocate()
        controlBuffer.deallocate()  // both halves: one allocation
    }

    /// Closes the socket (once) and every fd the decoder or the send queue still holds.
    public func close() {
        if descriptor >= 0 {
            _ = Glibc.close(descriptor)
            descriptor = -1
        }
        if decoder.error == nil { decoder.abort(.connectionClosed) }
        for item in queue[queueHead...] { item.frame.closeFDs() }
        queue = []
        queueHead = 0
        pendingOutputBytes = 0
        pendingOutputFDs = 0
    }

    /// `shutdown(SHUT_WR)`: the peer reads end of stream after the frames already sent.
    public func shutdownWrite() throws(WireError) {
        guard descriptor >= 0 else { throw .connectionClosed }
        if Glibc.shutdown(descriptor, Int32(SHUT_WR)) != 0 { throw .systemCall("shutdown", errno: errno) }
    }

    /// Sets or clears `O_NONBLOCK`.
    public func setNonBlocking(_ nonBlocking: Bool) throws(WireError) {
        let flags = fcntl(descriptor, F_GETFL)
        guard flags >= 0 else { throw .systemCall("fcntl", errno: errno) }
        let new = nonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        if new != flags, fcntl(descriptor, F_SETFL, new) != 0 { throw .systemCall("fcntl", errno: errno) }
    }

    /// A connected pair of `AF_UNIX` `SOCK_STREAM` sockets with `SOCK_CLOEXEC`.
    public static func makeSocketPair(nonBlocking: Bool = false) throws(WireError) -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        var type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        guard socketpair(AF_UNIX, type, 0, &fds) == 0 else { throw .systemCall("socketpair", errno: errno) }
        return (fds[0], fds[1])
    }

    /// Two `FrameSocket`s over a new socket pair.
    public static func makePair(maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize)
        throws(WireError) -> (FrameSocket, FrameSocket) {
        let (a, b) = try makeSocketPair()
        return (FrameSocket(descriptor: a, maximumFrameSize: maximumFrameSize, peerMaximumFrameSize: maximumFrameSize),
                FrameSocket(descriptor: b, maximumFrameSize: maximumFrameSize, peerMaximumFrameSize: maximumFrameSize))
    }

    // MARK: Sending

    /// Sends `frame` whole, blocking until every byte is written (after any frames still queued by
    /// ``enqueue(_:)``). Its fds travel with the first byte; they stay the caller's (see ``Frame``).
    public func send(_ frame: Frame) throws(WireError) {
        let header = try encoder.validate(frame)
        guard descriptor >= 0 else { throw .connectionClosed }
        while !(try flush()) { try wait(for: Int16(POLLOUT)) }
        // 20 bytes of prefix and header on the stack.
        var headerStorage: (UInt64, UInt64, UInt32) = (0, 0, 0)
        try withUnsafeMutableBytes(of: &headerStorage) { raw in
            header.encode(into: raw)
            let headerBytes = UnsafeRawBufferPointer(rebasing: raw[..<FrameHeader.encodedSize])
            return frame.payload.withUnsafeBytes { payload in
                Result { () throws(WireError) in
                    var sent = 0
                    let total = FrameHeader.encodedSize + payload.count
                    while sent < total {
                        let n = try write(header: headerBytes, payload: payload, fds: sent == 0 ? frame.fds : [], from: sent, flags: 0)
                        if n < 0 { try wait(for: Int16(POLLOUT)) } else { sent += n }
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
            frame.closeFDs()
            throw error
        }
        guard descriptor >= 0 else {
            frame.closeFDs()
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
                return frame.payload.withUnsafeBytes { payload in
                    Result { () throws(WireError) in
                        try write(header: headerBytes, payload: payload, fds: frame.fds, from: 0, flags: Int32(MSG_DONTWAIT))
                    }
                }
            }
            let written: Int
            do { written = try attempt.get() } catch {
                frame.closeFDs()
                throw error
            }
            if written == FrameHeader.encodedSize + frame.payload.count {
                frame.closeFDs()
                return
            }
            sent = max(written, 0)
        }
        var bytes = [UInt8](repeating: 0, count: FrameHeader.encodedSize)
        bytes.withUnsafeMutableBytes { header.encode(into: $0) }
        queue.append(Outgoing(header: bytes, frame: frame, sent: sent))
        pendingOutputBytes += FrameHeader.encodedSize + frame.payload.count - sent
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
        item.frame.closeFDs()
        return true
    }

    /// Whether frames queued by ``enqueue(_:)`` are still (partly) unwritten.
    public var hasPendingOutput: Bool { queueHead < queue.count }

    /// Writes queued frames until done or the socket would block. Returns `true` when the queue is
    /// empty. Never blocks (`MSG_DONTWAIT`).
    @discardableResult
    public func flush() throws(WireError) -> Bool {
        while queueHead < queue.count {
            guard descriptor >= 0 else { throw .connectionClosed }
            let item = queue[queueHead]
            let n = try item.header.withUnsafeBytes { header in
                item.frame.payload.withUnsafeBytes { payload in
                    Result { () throws(WireError) in
                        try write(header: header, payload: payload, fds: item.sent == 0 ? item.frame.fds : [], from: item.sent,
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

    /// One `sendmsg` of the frame's bytes from offset `sent` (fds attached when given). Returns the
    /// bytes written, or -1 for `EAGAIN`.
    private func write(header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, fds: [Int32],
                       from sent: Int, flags: Int32) throws(WireError) -> Int {
        var iov = (iovec(), iovec())
        var iovCount = 0
        if sent < header.count {
            iov.0 = iovec(iov_base: UnsafeMutableRawPointer(mutating: header.baseAddress! + sent), iov_len: header.count - sent)
            iovCount = 1
            if payload.count > 0 {
                iov.1 = iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress!), iov_len: payload.count)
                iovCount = 2
            }
        } else {
            let offset = sent - header.count
            iov.0 = iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress! + offset), iov_len: payload.count - offset)
            iovCount = 1
        }
        let control = sendControlBuffer
        let result: Int = withUnsafeMutablePointer(to: &iov) { iovPointer in
            iovPointer.withMemoryRebound(to: iovec.self, capacity: 2) { iovs in
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
                while true {
                    let n = sendmsg(descriptor, &message, Int32(MSG_NOSIGNAL) | flags)
                    if n >= 0 || errno != EINTR { return n }
                }
            }
        }
        if result >= 0 { return result }
        switch errno {
        case EAGAIN, EWOULDBLOCK: return -1
        case EPIPE, ECONNRESET: throw .connectionClosed
        case let code: throw .systemCall("sendmsg", errno: code)
        }
    }

    // MARK: Receiving

    /// Receives the next frame, blocking until it is complete. Returns `nil` when the peer closed
    /// the connection at a frame boundary; throws ``WireError/truncatedFrame(received:expected:)``
    /// if it closed in the middle of one, and any other ``WireError`` for malformed input (after
    /// closing every fd received with it). The frame's fds are the caller's.
    public func receive() throws(WireError) -> Frame? {
        while true {
            switch try tryReceive() {
            case .frame(let frame): return frame
            case .closed: return nil
            case .wouldBlock: try wait(for: Int16(POLLIN))
            }
        }
    }

    /// Whether bytes already read from the socket wait in this object's buffer (a poll of the
    /// descriptor does not see them).
    public var hasBufferedInput: Bool { readStart < readEnd }

    /// Receives the next frame if the bytes for it are available, without blocking on a
    /// non-blocking socket (on a blocking one it blocks like ``receive()``).
    public func tryReceive() throws(WireError) -> ReceiveResult {
        try receive(flags: 0, trustShortReads: false)
    }

    /// The next frame, for loops that read until the socket is empty and then do something else
    /// (wait in `epoll`, run queued work):
    /// - `wait: false` never blocks, whatever the socket's mode (`MSG_DONTWAIT`), and saves the
    ///   `recvmsg` that would only say `EAGAIN`: when the last read came back short (fewer bytes
    ///   than it had room for, no fds), the socket held nothing more at that moment, so it reports
    ///   ``ReceiveResult/wouldBlock`` at once (once; the next call reads again). Bytes that arrived
    ///   since are still in the socket: a level-triggered `epoll` reports them, a blocking read
    ///   returns them at once.
    /// - `wait: true` is ``tryReceive()``: on a blocking socket it waits for bytes.
    public func receiveNext(wait: Bool) throws(WireError) -> ReceiveResult {
        wait ? try receive(flags: 0, trustShortReads: false) : try receive(flags: Int32(MSG_DONTWAIT), trustShortReads: true)
    }

    private func receive(flags: Int32, trustShortReads: Bool) throws(WireError) -> ReceiveResult {
        while true {
            if readStart < readEnd {
                let (consumed, frame) = try decoder.consume(
                    UnsafeRawBufferPointer(rebasing: readBuffer[readStart..<readEnd]))
                readStart += consumed
                if readStart == readEnd {
                    readStart = 0
                    readEnd = 0
                    do { try decoder.endChunk() } catch {
                        frame?.closeFDs()
                        throw error
                    }
                }
                if let frame { return .frame(frame) }
                continue
            }
            guard descriptor >= 0 else { throw .connectionClosed }
            if lastReadWasShort {
                lastReadWasShort = false
                if trustShortReads { return .wouldBlock }
            }
            if decoder.remainingPayloadCount >= Self.directReadThreshold {
                // Large payload: read straight into the frame, no more than it still needs (so no
                // fds can legitimately arrive with these bytes).
                var fds: [Int32] = []
                var failure: WireError?
                let (n, frame) = decoder.readPayload { buffer in
                    do throws(WireError) {
                        let (n, received) = try receiveMessage(into: buffer, flags: flags)
                        fds = received
                        lastReadWasShort = n > 0 && n < buffer.count && received.isEmpty
                        return n
                    } catch {
                        failure = error
                        return -2
                    }
                }
                if let failure { throw decoder.abort(failure) }
                if !fds.isEmpty {
                    closeDescriptors(fds)
                    frame?.closeFDs()
                    throw decoder.abort(.unexpectedFDs(count: fds.count))
                }
                if let frame { return .frame(frame) }
                if n == -1 { return .wouldBlock }
                if n == 0 {
                    try decoder.finish()
                    return .closed
                }
                continue
            }
            let n: Int
            let fds: [Int32]
            do { (n, fds) = try receiveMessage(into: readBuffer, flags: flags) } catch { throw decoder.abort(error) }
            if n < 0 { return .wouldBlock }
            lastReadWasShort = n > 0 && n < readBuffer.count && fds.isEmpty
            if n == 0 {
                if !fds.isEmpty {
                    closeDescriptors(fds)
                    throw decoder.abort(.unexpectedFDs(count: fds.count))
                }
                try decoder.finish()
                return .closed
            }
            try decoder.beginChunk(fds: fds)
            readEnd = n
        }
    }

    /// One `recvmsg` with `MSG_CMSG_CLOEXEC`. Returns the byte count (-1 for `EAGAIN`, 0 at end of
    /// stream) and the fds received. Throws ``WireError/controlDataTruncated`` for `MSG_CTRUNC`
    /// (after closing the fds that did arrive).
    private func receiveMessage(into buffer: UnsafeMutableRawBufferPointer, flags: Int32) throws(WireError) -> (Int, [Int32]) {
        var iov = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
        var message = msghdr()
        let n: Int = withUnsafeMutablePointer(to: &iov) { iovPointer in
            message.msg_iov = iovPointer
            message.msg_iovlen = 1
            message.msg_control = controlBuffer.baseAddress
            message.msg_controllen = controlBuffer.count
            while true {
                let n = recvmsg(descriptor, &message, Int32(MSG_CMSG_CLOEXEC) | flags)
                if n >= 0 || errno != EINTR { return n }
            }
        }
        if n < 0 {
            switch errno {
            case EAGAIN, EWOULDBLOCK: return (-1, [])
            case ECONNRESET: return (0, [])
            case let code: throw .systemCall("recvmsg", errno: code)
            }
        }
        var fds: [Int32] = []
        // Walk the cmsghdrs: CMSG_FIRSTHDR / CMSG_NXTHDR with 8-byte alignment.
        let controlLength = min(message.msg_controllen, controlBuffer.count)
        var offset = 0
        while offset + cmsgHeaderSize <= controlLength {
            let length = controlBuffer.loadUnaligned(fromByteOffset: offset, as: Int.self)
            let level = controlBuffer.loadUnaligned(fromByteOffset: offset + 8, as: Int32.self)
            let type = controlBuffer.loadUnaligned(fromByteOffset: offset + 12, as: Int32.self)
            guard length >= cmsgHeaderSize, offset + length <= controlLength else { break }
            if level == SOL_SOCKET, type == Int32(SCM_RIGHTS) {
                let count = (length - cmsgHeaderSize) / MemoryLayout<Int32>.size
                for index in 0..<count {
                    fds.append(controlBuffer.loadUnaligned(
                        fromByteOffset: offset + cmsgHeaderSize + index * MemoryLayout<Int32>.size, as: Int32.self))
                }
            }
            offset += cmsgAlign(length)
        }
        if message.msg_flags & Int32(MSG_CTRUNC) != 0 {
            closeDescriptors(fds)
            throw .controlDataTruncated
        }
        return (n, fds)
    }

    /// Waits until the socket is ready for `events`.
    private func wait(for events: Int16) throws(WireError) {
        guard descriptor >= 0 else { throw .connectionClosed }
        var entry = pollfd(fd: descriptor, events: events, revents: 0)
        while poll(&entry, 1, -1) < 0 {
            if errno != EINTR { throw .systemCall("poll", errno: errno) }
        }
    }
}

// MARK: - cmsg arithmetic (Linux, 64-bit: cmsghdr is { size_t len; int level; int type; })

let cmsgHeaderSize = MemoryLayout<cmsghdr>.size  // 16
@inline(__always) func cmsgAlign(_ length: Int) -> Int {
    (length + MemoryLayout<Int>.size - 1) & ~(MemoryLayout<Int>.size - 1)
}
@inline(__always) func cmsgLength(_ dataLength: Int) -> Int { cmsgAlign(cmsgHeaderSize) + dataLength }
@inline(__always) func cmsgSpace(_ dataLength: Int) -> Int { cmsgAlign(cmsgHeaderSize) + cmsgAlign(dataLength) }
