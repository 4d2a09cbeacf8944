import Dispatch
import ExtSandboxWire
import Glibc
import Synchronization

/// One connection's socket: its sending direction, shared by the request tasks (which send
/// under the lock), and the descriptor, which the reader thread (the only one to receive, with a
/// ``FrameReceiver`` of its own) closes at the end.
final class ConnectionWriter: Sendable {
    private struct Writer {
        let sender: FrameSender
        /// Whether the socket is still open.
        var open = true
    }

    let descriptor: FileDescriptor
    /// Held while a frame is written.
    private let writer: Mutex<Writer>
    let tasks = Mutex<[UInt64: Task<Void, Never>]>([:])

    /// Takes ownership of `descriptor`, a connected socket.
    init(descriptor: FileDescriptor) {
        self.descriptor = descriptor
        // An extension's request tasks may wait for room for their fds: it delays only this extension.
        writer = Mutex(Writer(sender: FrameSender(descriptor: descriptor, waitsForDescriptorRoom: true)))
    }

    /// Sends whole frames one at a time, then closes their fds; a failed send shuts the socket
    /// so the reader stops. A reply the host could not take (over its maximum frame size, too
    /// many fds) becomes an error for that request instead: the connection carries on.
    var send: @Sendable (Frame) -> Void {
        { [self] frame in _ = write(frame) }
    }

    enum WriteResult { case sent, overTheHostsLimits, closed }

    /// Sends `frame` whole, then closes its fds. A frame over the host's limits is not sent and
    /// the connection carries on (a reply becomes an ERROR 6 for its request); any other failure
    /// shuts the socket so the reader stops.
    func write(_ frame: Frame) -> WriteResult {
        writer.withLock { writer in
            defer { frame.closeFDs() }
            guard writer.open else { return .closed }
            let socket = writer.sender
            do throws(WireError) {
                try socket.send(frame)
                return .sent
            } catch .frameTooLarge, .tooManyFDs {
                // `send` checks a frame against the host's limits before writing a byte.
                guard frame.kind == .reply else { return .overTheHostsLimits }
                let refusal = Frame.error(id: frame.id, code: .tooLarge, message: "the reply cannot be sent: over the host's limits")
                do { try socket.send(refusal) } catch { socket.shutdownReadAndWrite() }
                return .overTheHostsLimits
            } catch {
                socket.shutdownReadAndWrite()
                return .closed
            }
        }
    }

    func setPeerMaximumFrameSize(_ size: UInt32) {
        writer.withLock { $0.sender.encoder.maximumFrameSize = size }
    }

    /// Closes the socket (once); later sends are dropped. By the reader thread, with its
    /// `receiver`, which stops receiving.
    func close(_ receiver: FrameReceiver) {
        receiver.detach()
        writer.withLock { writer in
            writer.sender.detach()
            if writer.open { descriptor.close() }
            writer.open = false
        }
    }
}
