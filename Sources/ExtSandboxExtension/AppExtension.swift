import ExtSandboxWire
import Glibc
import SandboxSystem

/// Bytes and file descriptors, as an extension receives and answers them.
public struct Message: Sendable {
    /// The message's bytes.
    public var payload: [UInt8] {
        // A received call's large byte-array argument is held apart (so that the method gets
        // it without a copy): only a handler that reads the bytes joins them.
        get { tail.isEmpty ? head : head + tail }
        set {
            head = newValue
            tail = []
        }
    }
    /// The message's descriptors, owned: a received one is closed when the last reference to it
    /// goes (keep it, or take its number with `release()`); a sent one is closed once sent.
    public var fileDescriptors: [FileDescriptor]
    /// The numbers of ``fileDescriptors``, for system calls (valid while the message holds them).
    public var fileDescriptorNumbers: [Int32] { fileDescriptors.map(\.rawValue) }
    /// The payload's bytes, but for `tail`.
    private(set) var head: [UInt8]
    /// The payload's last bytes, received into an array of their own (a frame's `payloadTail`).
    private(set) var tail: [UInt8] = []

    public init(_ payload: [UInt8] = [], fileDescriptors: [FileDescriptor] = []) {
        head = payload
        self.fileDescriptors = fileDescriptors
    }

    /// A received payload in two parts: `head` then `tail`.
    init(_ head: [UInt8], followedBy tail: [UInt8], fileDescriptors: [FileDescriptor]) {
        self.head = head
        self.tail = tail
        self.fileDescriptors = fileDescriptors
    }
}

/// What the extension learns about a connection before it accepts it.
public struct ConnectionRequest: Sendable {
    /// The host's name for itself in its HELLO (the host API sends the extension's identifier).
    public var hostName: String?
}

/// An extension error answer: a code (100 and above are the extension's own) and a message.
public struct ExtensionFailure: Error, Sendable {
    public var code: UInt32
    public var message: String

    public init(code: UInt32 = 100, _ message: String) {
        self.code = code
        self.message = message
    }
}

/// An extension's entry point (ExtensionFoundation's `AppExtension`): mark the type `@main`.
///
/// An extension serves a typed object (a distributed actor of a `@Resolvable` contract the host
/// shares) on every connection:
///
/// ```swift
/// distributed actor Upcaser: TextFilter {
///     distributed func apply(_ text: String, options: FilterOptions) -> String { text.uppercased() }
/// }
///
/// @main struct Upcase: AppExtension {
///     func exportedObject(_ system: ExtensionActorSystem) -> ExportedObject? {
///         ExportedObject(Upcaser(actorSystem: system), as: $TextFilter.self)
///     }
/// }
/// ```
///
/// and the host calls it through a proxy: `try connection.remoteObject($TextFilter.self)`. It
/// may call the host's exported object too (``HostConnection/remoteObject(_:)``).
///
/// The layer below, for an extension that speaks no contract: it answers byte messages itself
/// (typed calls are such requests, whose bytes are call envelopes):
///
/// ```swift
/// @main struct Upcase: AppExtension {
///     func handle(request: Message) async throws -> Message {
///         Message(request.payload.map { $0 >= 97 && $0 <= 122 ? $0 - 32 : $0 })
///     }
/// }
/// ```
///
/// The runtime speaks the wire protocol (docs/wire-protocol.md) on the control socket the
/// sandbox passes as fd 3: it says READY, takes each new connection, asks ``accept(_:)``,
/// and runs ``handle(request:)`` for every request, answering with its result or its error. A
/// cancelled request's task is cancelled. Its start-up makes few system calls, so extensions
/// run under the `hardened` policy (build them with `--static-swift-stdlib`).
public protocol AppExtension: Sendable {
    init()
    /// Accepts or rejects a connection. Accepts every connection by default.
    func accept(_ connection: ConnectionRequest) -> Bool
    /// Answers one request. Throw ``ExtensionFailure`` for an error answer. By default, serves
    /// it as a distributed call on ``exportedObject(_:)`` (``HostConnection/serveCall(_:)``),
    /// or on the system target every implementation serves (docs/wire-protocol.md §12.4).
    func handle(request: Message) async throws -> Message
    /// The object the extension serves on each new connection (ExtensionFoundation's
    /// `exportedObject`), made with that connection's actor system, and the contract the host
    /// calls it through:
    ///
    /// ```swift
    /// func exportedObject(_ system: ExtensionActorSystem) -> ExportedObject? {
    ///     ExportedObject(Upcaser(actorSystem: system), as: $TextFilter.self)
    /// }
    /// ```
    ///
    /// None by default.
    func exportedObject(_ system: ExtensionActorSystem) -> ExportedObject?
    /// Receives a message that needs no answer. Ignores it (closing its fds) by default.
    func handle(oneWay: Message) async
    /// A connection was accepted: `host` sends the extension's own requests and one-way
    /// messages to the host on it (keep it to use later; during a request ``HostConnection/current``
    /// is the same). Does nothing by default.
    func connected(_ host: HostConnection)
}

extension AppExtension {
    public func accept(_ connection: ConnectionRequest) -> Bool { true }

    public func handle(request: Message) async throws -> Message {
        guard let host = HostConnection.current else { throw ExtensionFailure(code: 2, "no connection") }
        return try await host.serveCall(request)
    }

    public func exportedObject(_ system: ExtensionActorSystem) -> ExportedObject? { nil }

    public func handle(oneWay message: Message) async {
        for descriptor in message.fileDescriptors { descriptor.close() }
    }

    public func connected(_ host: HostConnection) {}

    /// Runs the extension until the host goes away.
    ///
    /// On the main actor (the main thread): a nonisolated `main` would hop to the global
    /// executor first, and libdispatch would start two worker threads in every extension just to
    /// say READY and start the connection threads.
    @MainActor public static func main() async {
        await ExtensionRuntime(extension: Self()).run()
    }
}
