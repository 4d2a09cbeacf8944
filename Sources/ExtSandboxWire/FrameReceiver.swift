#if canImport(Glibc)
import Glibc
#endif
import SandboxSystem

/// The receiving direction of a frame socket: the decoder, the read buffer and the `recvmsg`
/// ancillary buffer, and nothing the sending direction uses.
///
/// ``FrameSocket`` holds one; a connection whose two directions are used by different threads
/// makes one of its own with ``init(descriptor:maximumFrameSize:)`` beside a ``FrameSender``. It
/// does not own the descriptor: its owner calls ``detach()`` before closing it.
public final class FrameReceiver {
    /// The socket (its owner's: this object never closes it); nil once detached.
    public private(set) var descriptor: FileDescriptor?
    /// Decodes incoming frames; its ``FrameDecoder/maximumFrameSize`` is this side's maximum.
    public private(set) var decoder: FrameDecoder

    /// Starts at ``FrameSocket/initialReceiveBufferSize`` and is replaced by one of
    /// ``FrameSocket/receiveBufferSize`` after a read that filled it (see ``growIfFilled()``).
    private var readBuffer: UnsafeMutableRawBufferPointer
    /// Whether the last `recvmsg` into `readBuffer` filled it: more may wait.
    private var lastReadFilledBuffer = false
    private var readStart = 0
    private var readEnd = 0
    /// Whether the last `recvmsg` returned fewer bytes than it had room for, and no fds: the
    /// socket held nothing more at that moment (see ``receiveNext(wait:)``).
    private var lastReadWasShort = false
    /// Ancillary data of `recvmsg`.
    private let controlBuffer: UnsafeMutableRawBufferPointer

    /// Receives from `descriptor` (a connected stream socket that stays its owner's).
    /// - Parameters:
    ///   - maximumFrameSize: the largest frame this side accepts (advertise it in your HELLO).
    ///   - untrustedPeer: the fds it drops are closed with ``UntrustedDescriptors/close(_:)``.
    ///   - payloadSplitter: where a large payload splits (``FrameDecoder/PayloadSplitter``): its
    ///     tail is then read from the socket straight into an array of its own.
    public init(descriptor: FileDescriptor, maximumFrameSize: UInt32 = ExtSandboxWire.defaultMaximumFrameSize,
                untrustedPeer: Bool = false, payloadSplitter: FrameDecoder.PayloadSplitter? = nil) {
        self.descriptor = descriptor
        decoder = FrameDecoder(maximumFrameSize: maximumFrameSize, untrustedPeer: untrustedPeer, payloadSplitter: payloadSplitter)
        readBuffer = .allocate(byteCount: FrameSocket.initialReceiveBufferSize, alignment: 16)
        controlBuffer = .allocate(byteCount: FrameSocket.receiveControlBufferSize, alignment: 16)
    }

    deinit {
        detach()
        readBuffer.deallocate()
        controlBuffer.deallocate()
    }

    /// Stops using the descriptor (before its owner closes it) and closes the fds of a frame
    /// partly received. Later receives throw ``WireError/connectionClosed``.
    public func detach() {
        descriptor = nil
        if decoder.error == nil { decoder.abort(.connectionClosed) }
    }

    /// Receives the next frame, blocking until it is complete. Returns `nil` when the peer closed
    /// the connection at a frame boundary; throws ``WireError/truncatedFrame(received:expected:)``
    /// if it closed in the middle of one, and any other ``WireError`` for malformed input (after
    /// closing every fd received with it). The frame's fds are the caller's.
    public func receive() throws(WireError) -> Frame? {
        while true {
            switch try tryReceive() {
            case .frame(let frame): return frame
            case .closed: return nil
            case .wouldBlock: try waitUntilReady(descriptor, for: Int16(POLLIN))
            }
        }
    }

    /// Whether bytes already read from the socket wait in this object's buffer (a poll of the
    /// descriptor does not see them).
    public var hasBufferedInput: Bool { readStart < readEnd }

    /// Bytes the receive buffer holds at most now: ``FrameSocket/initialReceiveBufferSize``
    /// until a read fills it, ``FrameSocket/receiveBufferSize`` from then on.
    public var receiveBufferCapacity: Int { readBuffer.count }

    /// After a read that filled the small buffer (a peer sending faster than one page per read),
    /// the next reads get the full-size one. Called only when the buffer is empty (every read
    /// is), so nothing is copied. One reallocation per socket at most.
    private func growIfFilled() {
        guard lastReadFilledBuffer, readBuffer.count < FrameSocket.receiveBufferSize else { return }
        lastReadFilledBuffer = false
        readBuffer.deallocate()
        readBuffer = .allocate(byteCount: FrameSocket.receiveBufferSize, alignment: 16)
    }

    /// Receives the next frame if the bytes for it are available, without blocking on a
    /// non-blocking socket (on a blocking one it blocks like ``receive()``).
    public func tryReceive() throws(WireError) -> FrameSocket.ReceiveResult {
        try receive(flags: 0, trustShortReads: false)
    }

    /// The next frame, for loops that read until the socket is empty and then do something else
    /// (wait in `epoll`, run queued work):
    /// - `wait: false` never blocks, whatever the socket's mode (`MSG_DONTWAIT`), and saves the
    ///   `recvmsg` that would only say `EAGAIN`: when the last read came back short (fewer bytes
    ///   than it had room for, no fds), the socket held nothing more at that moment, so it reports
    ///   ``FrameSocket/ReceiveResult/wouldBlock`` at once (once; the next call reads again). Bytes that arrived
    ///   since are still in the socket: a level-triggered `epoll` reports them, a blocking read
    ///   returns them at once.
    /// - `wait: true` is ``tryReceive()``: on a blocking socket it waits for bytes.
    public func receiveNext(wait: Bool) throws(WireError) -> FrameSocket.ReceiveResult {
        wait ? try receive(flags: 0, trustShortReads: false) : try receive(flags: Int32(MSG_DONTWAIT), trustShortReads: true)
    }

    /// The next frame among the bytes already read, without reading the socket: once those are
    /// decoded (a frame they end in the middle of is kept for the next read),
    /// ``FrameSocket/ReceiveResult/wouldBlock``. For a reader that must stop and leave what is
    /// still in the socket to a level-triggered `epoll`.
    public func receiveBuffered() throws(WireError) -> FrameSocket.ReceiveResult {
        try receive(flags: Int32(MSG_DONTWAIT), trustShortReads: true, bufferedOnly: true)
    }

    private func receive(flags: Int32, trustShortReads: Bool, bufferedOnly: Bool = false) throws(WireError) -> FrameSocket.ReceiveResult {
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
            if bufferedOnly {
                // Whatever the last read said of the socket, the next one must look again: the
                // caller stopped before it (a reader that then waited and found it readable).
                lastReadWasShort = false
                return .wouldBlock
            }
            guard let socket = descriptor?.rawValue else { throw .connectionClosed }
            if lastReadWasShort {
                lastReadWasShort = false
                if trustShortReads { return .wouldBlock }
            }
            if decoder.remainingPayloadCount >= FrameSocket.directReadThreshold {
                // Large payload: read straight into the frame, no more than it still needs (so no
                // fds can legitimately arrive with these bytes).
                var fds: [Int32] = []
                var failure: WireError?
                let (n, frame) = decoder.readPayload { buffer in
                    do throws(WireError) {
                        let (n, received) = try receiveMessage(from: socket, into: buffer, flags: flags)
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
                    UntrustedDescriptors.close(fds, untrusted: decoder.untrustedPeer)
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
            growIfFilled()
            let n: Int
            let fds: [Int32]
            do { (n, fds) = try receiveMessage(from: socket, into: readBuffer, flags: flags) } catch { throw decoder.abort(error) }
            if n < 0 { return .wouldBlock }
            lastReadWasShort = n > 0 && n < readBuffer.count && fds.isEmpty
            lastReadFilledBuffer = n == readBuffer.count
            if n == 0 {
                if !fds.isEmpty {
                    UntrustedDescriptors.close(fds, untrusted: decoder.untrustedPeer)
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
    private func receiveMessage(from socket: Int32, into buffer: UnsafeMutableRawBufferPointer, flags: Int32) throws(WireError) -> (Int, [Int32]) {
        let (n, fds, truncated) = receiveWithDescriptors(from: socket, into: buffer, control: controlBuffer, flags: flags)
        if n < 0 {
            switch errno {
            case EAGAIN, EWOULDBLOCK: return (-1, [])
            case ECONNRESET: return (0, [])
            case let code: throw .systemCall("recvmsg", errno: code)
            }
        }
        if truncated {
            UntrustedDescriptors.close(fds, untrusted: decoder.untrustedPeer)
            throw .controlDataTruncated
        }
        return (n, fds)
    }
}
