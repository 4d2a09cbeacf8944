/// `FrameSocket` owns its socket as a `FileDescriptor` (closed once): users of this module get the
/// type with it.
@_exported import class SandboxSystem.FileDescriptor

/// The host/extension wire protocol (docs/wire-protocol.md).
///
/// Every connection is one `AF_UNIX` `SOCK_STREAM` socket carrying length-prefixed frames; file
/// descriptors travel as `SCM_RIGHTS` ancillary data attached to the first byte of the frame that
/// declares them. This module holds the value types (``Frame``, ``FrameHeader``, ``Hello``,
/// ``ErrorPayload``), the codec (``FrameEncoder``, ``FrameDecoder``) and the socket I/O
/// (``FrameSocket``). It depends on Glibc, the Swift standard library and the owned descriptor
/// type of `SandboxSystem` (re-exported below, being part of ``FrameSocket``'s API).
public enum ExtSandboxWire {
    /// The protocol version this implementation speaks, carried in ``Hello/version``.
    public static let protocolVersion: UInt16 = 1

    /// Size of the big-endian length prefix that starts every frame.
    public static let lengthPrefixSize = 4

    /// Size of the fixed header that follows the length prefix (kind, flags, fd count, reserved, id).
    public static let headerSize = 16

    /// Default maximum frame size (the value of the length field: header plus payload): 16 MiB.
    public static let defaultMaximumFrameSize: UInt32 = 16 * 1024 * 1024

    /// The smallest maximum frame size a peer may advertise in its ``Hello``: 4 KiB.
    public static let minimumMaximumFrameSize: UInt32 = 4096

    /// The most file descriptors one frame may carry.
    public static let maximumFDsPerFrame = 16

    /// The file descriptor on which an extension process finds its control socket.
    public static let controlSocketDescriptor: Int32 = 3
}
