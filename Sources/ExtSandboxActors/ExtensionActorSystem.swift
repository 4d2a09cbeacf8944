import Distributed
import Synchronization

/// The distributed actor system of one connection between a host and an extension.
///
/// A contract is a protocol both sides share:
///
/// ```swift
/// @Resolvable
/// public protocol TextFilter: DistributedActor where ActorSystem == ExtensionActorSystem {
///     distributed func apply(_ text: String) async throws -> String
/// }
/// ```
///
/// Each side exports at most one object per connection (``export(_:)``, an ``ExportedObject``)
/// and resolves the peer's with ``remoteObject(_:)``: a proxy whose calls travel as call
/// envelopes in REQUEST frames (docs/wire-protocol.md §12). Arguments and results are any `Codable` values; an error
/// the remote method throws comes back as itself when both sides registered its type
/// (``register(error:as:)``), otherwise as ``DistributedCallError``. The connection's own
/// failures (the process ended mid-call, the call was cancelled) are thrown as the connection
/// throws them.
///
/// The system holds its connection and its local actors weakly: the connection owns the object
/// it serves, which owns its actor system.
public final class ExtensionActorSystem: DistributedActorSystem, Sendable {
    public typealias ActorID = ExtensionActorID
    public typealias InvocationEncoder = ExtensionInvocationEncoder
    public typealias InvocationDecoder = ExtensionInvocationDecoder
    public typealias ResultHandler = ExtensionResultHandler
    public typealias SerializationRequirement = Codable

    private struct LocalActor {
        weak var actor: (any DistributedActor)?
    }

    private struct Exported {
        weak var object: (any DistributedActor)?
        let contract: MethodIdentifier.Contract
    }

    private struct State {
        weak var transport: (any CallTransport)?
        /// The transport again, held strongly, for a system that only calls (``attach(keepingOpen:)``).
        var keptOpen: (any CallTransport)?
        var locals: [ActorID: LocalActor] = [:]
        var nextLocal: UInt64 = 1
        var exported: Exported?
    }

    /// Which side of the connection this system serves.
    public let side: ConnectionSide
    private let state = Mutex(State())

    /// A system for `side` of a connection; ``attach(_:)`` gives it the connection.
    public init(side: ConnectionSide) {
        self.side = side
    }

    /// Sends this system's calls on `transport` (held weakly: calls fail with
    /// ``DistributedCallError/notSent(_:)`` once it is gone).
    public func attach(_ transport: any CallTransport) {
        state.withLock { $0.transport = transport }
    }

    /// Sends this system's calls on `transport` and keeps it open while the system lives, that
    /// is while a proxy it resolved lives (a proxy holds its system), as an XPC proxy keeps its
    /// connection. Only for a system that the transport does not hold in turn (one that serves
    /// nothing on it): that would be a cycle.
    public func attach(keepingOpen transport: any CallTransport) {
        state.withLock {
            $0.transport = transport
            $0.keptOpen = transport
        }
    }

    /// Registers a `Codable` error type of a contract under a name (the same on both sides): a
    /// remote method that throws it makes the caller throw it too. The name must not be empty
    /// nor contain a line feed.
    public static func register<Failure: Error & Codable>(error type: Failure.Type, as name: String) {
        RemoteErrorRegistry.shared.register(type, as: name)
    }

    /// Serves `exported` as this side's object on the connection: the peer may call the
    /// methods of its contract on it. (The runtime also checks, at each call, that the object
    /// conforms to the contract's protocol.) Held weakly: the caller keeps the object alive as
    /// long as it should be served.
    public func export(_ exported: ExportedObject) {
        state.withLock { $0.exported = Exported(object: exported.object, contract: exported.contract) }
    }

    /// A proxy for the peer's exported object, typed by the contract's `@Resolvable` protocol:
    /// `try system.remoteObject($TextFilter.self)`. Calls are only checked when made.
    ///
    /// Throws ``DistributedCallError/notSent(_:)`` only if a local actor of another type had the
    /// peer's name, which ``assignID(_:)`` never gives (its names are `host-N`, `extension-N`).
    public func remoteObject<Proxy: DistributedActor>(_ type: Proxy.Type) throws(DistributedCallError) -> Proxy where Proxy.ActorSystem == ExtensionActorSystem {
        do {
            return try Proxy.resolve(id: side.peerExportedID, using: self)
        } catch {
            // `resolve(id:as:)` below is all that runs, and throws only this type; the
            // protocol's requirement (and so `DistributedActor.resolve`) is untyped.
            switch error {
            case let error as DistributedCallError: throw error
            default: throw .notSent("\(Proxy.self) could not be resolved: \(error)")
            }
        }
    }

    // MARK: DistributedActorSystem

    public func resolve<Act: DistributedActor>(id: ActorID, as actorType: Act.Type) throws -> Act? where Act.ID == ActorID {
        guard let local = state.withLock({ $0.locals[id]?.actor }) else { return nil }
        guard let typed = local as? Act else {
            throw DistributedCallError.notSent("\(id) is a local \(type(of: local)), not a \(Act.self)")
        }
        return typed
    }

    public func assignID<Act: DistributedActor>(_ actorType: Act.Type) -> ActorID where Act.ID == ActorID {
        state.withLock { state in
            defer { state.nextLocal += 1 }
            return ActorID("\(side.exportedID.name)-\(state.nextLocal)")
        }
    }

    public func actorReady<Act: DistributedActor>(_ actor: Act) where Act.ID == ActorID {
        state.withLock { $0.locals[actor.id] = LocalActor(actor: actor) }
    }

    public func resignID(_ id: ActorID) {
        _ = state.withLock { $0.locals.removeValue(forKey: id) }
    }

    public func makeInvocationEncoder() -> InvocationEncoder {
        InvocationEncoder()
    }

    public func remoteCall<Act, Err, Res>(
        on actor: Act, target: RemoteCallTarget, invocation: inout InvocationEncoder, throwing: Err.Type, returning: Res.Type
    ) async throws -> Res where Act: DistributedActor, Act.ID == ActorID, Err: Error, Res: Codable {
        let (result, descriptors) = try await call(actor.id, target, invocation)
        do {
            return try ValueCoding.decode(Res.self, from: result[...], descriptors: descriptors)
        } catch {
            throw DistributedCallError.malformedResult("not a \(Res.self): \(error)")
        }
    }

    public func remoteCallVoid<Act, Err>(
        on actor: Act, target: RemoteCallTarget, invocation: inout InvocationEncoder, throwing: Err.Type
    ) async throws where Act: DistributedActor, Act.ID == ActorID, Err: Error {
        _ = try await call(actor.id, target, invocation)
    }

    /// The result's bytes and its received descriptors (those no value takes close with the table).
    private func call(_ id: ActorID, _ target: RemoteCallTarget, _ invocation: InvocationEncoder) async throws -> ([UInt8], DescriptorTable) {
        let envelope: (head: [UInt8], tail: [UInt8])
        do {
            envelope = try CallEnvelope.encodeParts(target: id.name, method: target.identifier, values: invocation.arguments)
        } catch {
            throw DistributedCallError.notSent("\(error)")
        }
        guard let transport = state.withLock({ $0.transport }) else {
            throw DistributedCallError.notSent("the connection is gone")
        }
        switch try await transport.call(envelope.head, followedBy: envelope.tail, fileDescriptors: invocation.descriptors.handOver()) {
        case .reply(let result, let fds): return (result, DescriptorTable(received: fds))
        case .error(let code, let message): throw DistributedCallError.answered(code: code, message: message)
        }
    }

    // MARK: Serving

    /// Serves one call envelope the peer sent (a REQUEST's payload, with its `fileDescriptors`,
    /// which this takes: those no argument takes are closed) on this side's exported object: the
    /// answer to send back. Never throws: every failure is an ERROR answer. Runs on the caller's
    /// executor (`nonisolated(nonsending)`) until the hop into the served actor: a server's reader
    /// thread keeps it, and no hop of its own is made on the way in or out.
    public nonisolated(nonsending) func serve(_ envelopeBytes: [UInt8], fileDescriptors: [Int32]) async -> CallAnswer {
        await serve(envelopeBytes, followedBy: [], fileDescriptors: fileDescriptors)
    }

    /// ``serve(_:fileDescriptors:)`` of an envelope whose last bytes, `tail`, were received apart
    /// (a frame's payload tail, ``CallEnvelope/trailingByteCount(payloadCount:prefix:)``): the last
    /// argument's byte array, which a `[UInt8]` parameter then takes as it is.
    public nonisolated(nonsending) func serve(_ envelopeBytes: [UInt8], followedBy tail: [UInt8], fileDescriptors: [Int32]) async -> CallAnswer {
        let descriptors = DescriptorTable(received: fileDescriptors)
        defer { descriptors.closeUntaken() }
        let envelope: CallEnvelope
        do {
            envelope = try CallEnvelope(decoding: envelopeBytes, followedBy: tail)
        } catch {
            return .error(code: CallErrorCode.malformedEnvelope, message: error.reason)
        }
        if envelope.target == SystemTarget.name { return SystemTarget.answer(envelope) }
        let id = ActorID(envelope.target)
        // Only the exported object is reachable: other local actors are this side's business.
        guard id == side.exportedID, let exported = state.withLock({ $0.exported }), let actor = exported.object else {
            return .error(code: CallErrorCode.unknownTarget, message: "no object named \(envelope.target)")
        }
        // Checked before anything runs: a method outside the contract (the runtime would call
        // another type's method on this object), or a wrong number of arguments.
        let method: ResolvedMethod
        do {
            guard let resolved = try MethodIdentifier(envelope.method).resolved(in: exported.contract, for: type(of: actor)) else {
                return .error(code: CallErrorCode.unknownMethod, message: "\(type(of: actor)) has no method \(envelope.method)")
            }
            method = resolved
        } catch {
            return ResultHandler.answer(for: error)
        }
        guard method.parameterCount == envelope.arguments.count else {
            return .error(code: CallErrorCode.undecodableArguments, message: "\(envelope.arguments.count) arguments for a method of \(method.parameterCount)")
        }
        var decoder = InvocationDecoder(arguments: envelope.arguments, trailingBytes: envelope.trailingBytes, actorType: type(of: actor),
                                        descriptors: descriptors)
        let handler = ResultHandler()
        await method.execute(on: actor, decoder: &decoder, handler: handler)
        return handler.answer ?? .error(code: CallErrorCode.thrownError, message: "the method produced no result")
    }
}
