/// The name of a distributed actor on one connection: a short UTF-8 string on the wire (the
/// call envelope's target, docs/wire-protocol.md §12).
///
/// Each side exports at most one object per connection, under a fixed name: ``host`` for the
/// host's, ``extension`` for the extension's. Other actors made with a connection's system are
/// named `host-N` or `extension-N` and are not reachable by the peer.
public struct ExtensionActorID: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The name, as it travels.
    public let name: String

    /// The actor named `name` (``host`` and ``extension`` are the exported objects).
    public init(_ name: String) {
        self.name = name
    }

    /// The object the host exports on a connection.
    public static let host = ExtensionActorID("host")
    /// The object the extension exports on every connection.
    public static let `extension` = ExtensionActorID("extension")

    public var description: String { name }

    /// An ID encoded as its name (a plain string).
    public init(from decoder: any Decoder) throws {
        name = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(name)
    }
}

/// Which side of a connection an actor system serves: it decides the name of the object it
/// exports and of the one it resolves.
public enum ConnectionSide: Sendable {
    /// The host's side: it exports ``ExtensionActorID/host``.
    case host
    /// The extension's side: it exports ``ExtensionActorID/extension``.
    case `extension`

    /// The name under which this side exports its object.
    public var exportedID: ExtensionActorID { self == .host ? .host : .extension }
    /// The name of the peer's exported object.
    public var peerExportedID: ExtensionActorID { self == .host ? .extension : .host }
}
