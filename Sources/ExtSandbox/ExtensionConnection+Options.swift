// What a host sets when it makes a connection: its handlers for the extension's messages, the
// bounds of the send queue, and the error its handlers answer with.
extension ExtensionConnection {
    /// What the host does with the extension's own requests and one-way messages on this
    /// connection (ExtensionFoundation's exported object). Set them when making the connection:
    /// ``AppExtensionProcess/makeConnection(handlers:)``.
    public struct Handlers: Sendable {
        /// Answers one request from the extension: its result is the REPLY, a thrown
        /// ``ExtensionFailure`` an ERROR with its code, anything else ERROR 5. Runs in a task of its
        /// own, cancelled when the extension cancels the request or the connection closes (the
        /// answer is then ERROR 3, or nothing once closed). Without one, every request is
        /// answered with ERROR 2 (unknown request).
        public var onRequest: (@Sendable (ExtensionMessage) async throws -> ExtensionMessage)?
        /// Receives the extension's one-way messages, one at a time, in order. Without one they
        /// are dropped (their fds closed).
        public var onOneWay: (@Sendable (ExtensionMessage) async -> Void)?
        /// How many of the extension's requests and one-way messages the host holds at once on
        /// this connection (default 64, at least 1). A request counts from its arrival until its
        /// answer is written or queued (within the ``SendQueueLimit``: an extension that does not
        /// read its answers keeps its requests outstanding); a one-way message until its handler
        /// returns. At the limit the host stops reading the connection until one is done: the
        /// extension's frames wait in the socket and its writes block. Nothing is dropped, but the
        /// answers to the host's own requests wait behind them too: a handler that waits for the
        /// extension on the same connection must not be one of more than this many at once.
        public var maximumOutstandingMessages: Int

        public init(onRequest: (@Sendable (ExtensionMessage) async throws -> ExtensionMessage)? = nil,
                    onOneWay: (@Sendable (ExtensionMessage) async -> Void)? = nil,
                    maximumOutstandingMessages: Int = 64) {
            self.onRequest = onRequest
            self.onOneWay = onOneWay
            self.maximumOutstandingMessages = maximumOutstandingMessages
        }
    }

    /// An error answer from a ``Handlers/onRequest`` handler: a code (100 and above are the
    /// application's) and a message.
    public struct ExtensionFailure: Error, Sendable {
        public var code: UInt32
        public var message: String

        public init(code: UInt32 = 100, _ message: String) {
            self.code = code
            self.message = message
        }
    }

    /// Bounds of a connection's send queue: frames written while the extension does not read
    /// wait in the host's memory (with their fds open) up to these. Beyond them ``send(_:)``
    /// waits for room, and ``sendOneWay(_:)`` fails at once with
    /// ``ExtensionError/sendQueueFull(bytes:fileDescriptors:)``. A frame is always admitted
    /// into an empty queue, whatever its size.
    public struct SendQueueLimit: Sendable, Hashable {
        /// Bytes of frames waiting (default 4 MiB).
        public var bytes: Int
        /// File descriptors attached to frames waiting (default 64).
        public var fileDescriptors: Int

        public init(bytes: Int = 4 << 20, fileDescriptors: Int = 64) {
            self.bytes = bytes
            self.fileDescriptors = fileDescriptors
        }
    }
}
