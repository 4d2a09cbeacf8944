@_exported import Distributed
@_exported import ExtSandboxActors
import Glibc
import SandboxSystem

// The host's side of distributed actors: a connection carries the calls (each a REQUEST whose
// payload is a call envelope, docs/wire-protocol.md §12), and serves the host's exported object.
extension ExtensionConnection: CallTransport {
    /// A proxy for the object the extension exports, typed by the contract's `@Resolvable`
    /// protocol: the counterpart of `NSXPCConnection.remoteObjectProxyWithErrorHandler` on the
    /// connection from ``AppExtensionProcess/makeConnection(handlers:)`` (`makeXPCConnection()`).
    ///
    /// ```swift
    /// let filter = try connection.remoteObject($TextFilter.self)   // no `as?` cast: typed
    /// let result = try await filter.apply("hello")
    /// ```
    ///
    /// There is no error handler: each call throws its own error, and the connection's end
    /// is the process's ``AppExtensionProcess/Configuration/onInterruption``.
    ///
    /// Each call is a request on this connection: it fails as ``send(_:)`` does (the process
    /// ended mid-call: ``ExtensionError/interrupted(_:)`` with its reason; the task cancelled:
    /// ``ExtensionError/cancelled``), or with `DistributedCallError` when the extension could
    /// not serve it, or with the error the remote method threw (a type both sides registered
    /// with `ExtensionActorSystem/register(error:as:)` comes back as itself). The proxy keeps
    /// the connection open, as an XPC proxy does: a host may keep only the proxy (Apple's
    /// articles do); the connection closes when it is invalidated, its process ends, or the
    /// last of it and its proxies is released.
    ///
    /// Making the proxy sends nothing and does not fail on a closed connection (its calls do):
    /// it throws `DistributedCallError.notSent` only if this connection's system had a
    /// local actor of another type under the extension's name, which it never names so.
    public func remoteObject<Proxy: DistributedActor>(_ type: Proxy.Type) throws(DistributedCallError) -> Proxy where Proxy.ActorSystem == ExtensionActorSystem {
        let system = ExtensionActorSystem(side: .host)
        // Nothing on the connection refers to this system: holding the connection is no cycle.
        system.attach(keepingOpen: self)
        return try system.remoteObject(type)
    }

    /// Sends a call envelope as a request (taking `fileDescriptors`: ``send(_:)`` sends copies,
    /// these close once it returns): the REPLY's payload and fds, or the ERROR's code and message.
    public func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws(ExtensionError) -> CallAnswer {
        try await call(envelope, followedBy: [], fileDescriptors: fileDescriptors)
    }

    /// ``call(_:fileDescriptors:)`` of the envelope `envelope` followed by `tail`: one REQUEST whose
    /// payload is written from the two arrays as they are (a large argument is not copied).
    public func call(_ envelope: [UInt8], followedBy tail: [UInt8], fileDescriptors: [Int32]) async throws(ExtensionError) -> CallAnswer {
        let owned = fileDescriptors.compactMap { FileDescriptor(adopting: $0) }
        defer { owned.forEach { $0.close() } }
        do throws(ExtensionError) {
            let reply = try await send(ExtensionMessage(envelope, fileDescriptors: owned), payloadTail: tail)
            return .reply(reply.payload, fileDescriptors: reply.fileDescriptors.releaseAll())
        } catch .remote(let code, let message) {
            return .error(code: code, message: message)
        }
    }
}

extension ExtensionConnection.ExtensionFailure: CodedCallError {}

extension AppExtensionProcess {
    /// Makes a connection on which the host serves `make`'s object to the extension (its
    /// `exportedObject`): the extension resolves it with `HostConnection.remoteObject`.
    ///
    /// ```swift
    /// let connection = try await process.makeConnection(exporting: $HostServices.self) { system in
    ///     Services(actorSystem: system)
    /// }
    /// ```
    ///
    /// The connection keeps the object alive; its requests are all calls of `contract`. The
    /// object's methods may take file descriptors (`TransferredFileDescriptor`) but not return
    /// them: such a result is answered with an error.
    public func makeConnection<Contract: DistributedActor>(
        exporting contract: Contract.Type, _ make: (ExtensionActorSystem) -> any DistributedActor
    ) async throws(ExtensionError) -> ExtensionConnection where Contract.ActorSystem == ExtensionActorSystem {
        let system = ExtensionActorSystem(side: .host)
        let exported = ExportedObject(make(system), as: contract)
        system.export(exported)
        let connection = try await makeConnection(handlers: ExtensionConnection.Handlers(onRequest: { message in
            // The handler holds the object: the system holds it (and the connection) weakly.
            let answer = await system.serve(message.payload, fileDescriptors: message.fileDescriptors.releaseAll())
            withExtendedLifetime(exported) {}
            switch answer {
            case .reply(_, let fds) where !fds.isEmpty:
                // The connection sends copies of a reply's fds and nothing would close these.
                for fd in fds { _ = Glibc.close(fd) }
                throw ExtensionConnection.ExtensionFailure(code: CallErrorCode.thrownError, "the host's methods cannot return file descriptors")
            case .reply(let result, _): return ExtensionMessage(result)
            case .error(let code, let text): throw ExtensionConnection.ExtensionFailure(code: code, text)
            }
        }))
        system.attach(connection)
        return connection
    }
}
