import Distributed

/// An object one side serves on a connection (ExtensionFoundation's `exportedObject`), with the
/// contract it serves: the `@Resolvable` stub of the protocol the peer calls it through.
///
/// ```swift
/// ExportedObject(Upcaser(actorSystem: system), as: $TextFilter.self)
/// ```
public struct ExportedObject: Sendable {
    /// The served object.
    public let object: any DistributedActor
    let contract: MethodIdentifier.Contract

    /// `object` served for the calls of `contract` (`$TextFilter` for `protocol TextFilter`):
    /// only that protocol's methods may be called on it.
    public init<Contract: DistributedActor>(_ object: any DistributedActor, as contract: Contract.Type)
    where Contract.ActorSystem == ExtensionActorSystem {
        self.object = object
        self.contract = MethodIdentifier.Contract(contract)
    }
}
