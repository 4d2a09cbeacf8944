@_exported import Distributed
@_exported import ExtSandboxActors

// The extension's side of distributed actors: the connection to the host carries the calls
// (docs/wire-protocol.md §12) and serves the extension's exported object.
extension HostConnection: CallTransport {
    /// A proxy for the object the host exports on this connection, typed by the contract's
    /// `@Resolvable` protocol: `try host.remoteObject($HostServices.self)`. Its calls fail as
    /// ``send(_:)`` does, with `DistributedCallError` when the host could not serve them
    /// (`DistributedCallError/notServed` when it exports nothing), or with the error the host's
    /// method threw. Making the proxy sends nothing: it throws only as
    /// `ExtensionActorSystem/remoteObject(_:)` does.
    public func remoteObject<Proxy: DistributedActor>(_ type: Proxy.Type) throws(DistributedCallError) -> Proxy where Proxy.ActorSystem == ExtensionActorSystem {
        try actorSystem.remoteObject(type)
    }

    /// Sends a call envelope as a request (taking `fileDescriptors`: closed once sent): the
    /// REPLY's payload and fds, or the ERROR's code and message. Throws what ``send(_:)`` throws
    /// but ``HostRequestError/remote(code:message:)``, which is the `.error` answer.
    public func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws(HostRequestError) -> CallAnswer {
        try await call(envelope, followedBy: [], fileDescriptors: fileDescriptors)
    }

    /// ``call(_:fileDescriptors:)`` of the envelope `envelope` followed by `tail`: one REQUEST whose
    /// payload is written from the two arrays as they are (a large argument is not copied).
    public func call(_ envelope: [UInt8], followedBy tail: [UInt8], fileDescriptors: [Int32]) async throws(HostRequestError) -> CallAnswer {
        do {
            let reply = try await send(Message(envelope, fileDescriptors: fileDescriptors.compactMap(FileDescriptor.init(adopting:))), payloadTail: tail)
            return .reply(reply.payload, fileDescriptors: reply.fileDescriptors.releaseAll())
        } catch .remote(let code, let message) {
            return .error(code: code, message: message)
        }
    }

    /// Serves one request as a call on the extension's exported object (what
    /// ``AppExtension/handle(request:)`` does by default). A call the extension could not serve
    /// throws the ``ExtensionFailure`` its ERROR answer carries (the code and message the host
    /// turns into `DistributedCallError`). Runs on the caller's executor, as
    /// `ExtensionActorSystem/serve(_:fileDescriptors:)` does.
    public nonisolated(nonsending) func serveCall(_ request: Message) async throws(ExtensionFailure) -> Message {
        switch await actorSystem.serve(request.head, followedBy: request.tail, fileDescriptors: request.fileDescriptors.releaseAll()) {
        case .reply(let result, let fds): return Message(result, fileDescriptors: fds.compactMap(FileDescriptor.init(adopting:)))
        case .error(let code, let message): throw ExtensionFailure(code: code, message)
        }
    }
}

extension ExtensionFailure: CodedCallError {}
