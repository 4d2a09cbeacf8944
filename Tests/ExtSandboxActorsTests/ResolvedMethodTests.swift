import Distributed
@testable import ExtSandboxActors
import Synchronization
import Testing

/// Served only by these tests, so that what is resolved for it is theirs alone.
distributed actor GermanGreeter: Greeter {
    typealias ActorSystem = ExtensionActorSystem
    var failures = 0
    distributed func greet(_ name: String) -> String { "hallo, \(name)" }
    distributed func fail(registered: Bool) throws {
        failures += 1
        if registered { throw GreetingError.tooRude(level: failures) }
    }
    distributed func refuse() throws { throw CodedRefusal() }
}

@Suite("A served method is resolved once per object type and kept")
struct ResolvedMethodTests {
    /// A host system calling an extension system that exports `served` as `$Greeter`.
    static func serving(_ make: (ExtensionActorSystem) -> any DistributedActor) -> (host: ExtensionActorSystem, served: any DistributedActor, transport: Loopback) {
        let host = ExtensionActorSystem(side: .host), ext = ExtensionActorSystem(side: .extension)
        let transport = Loopback(peer: ext)
        host.attach(transport)
        let served = make(ext)
        ext.export(ExportedObject(served, as: $Greeter.self))
        return (host, served, transport)
    }

    /// The identifiers the `$Greeter` proxy sends, as the served side receives them.
    final class Recording: CallTransport {
        let inner: Loopback
        let methods = Mutex<[String]>([])
        init(_ inner: Loopback) { self.inner = inner }
        func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer {
            let method = try CallEnvelope(decoding: envelope).method
            methods.withLock { $0.append(method) }
            return try await inner.call(envelope, fileDescriptors: fileDescriptors)
        }
    }

    @Test("repeated calls reuse one resolution of the method for the object's type; another type gets its own")
    func resolvedOncePerType() async throws {
        let (host, served, loopback) = Self.serving { GermanGreeter(actorSystem: $0) }
        let recording = Recording(loopback)
        host.attach(recording)
        let greeter = try host.remoteObject($Greeter.self)
        for name in ["a", "b", "c"] {
            #expect(try await greeter.greet(name) == "hallo, \(name)")
        }
        let greet = try #require(recording.methods.withLock { Set($0) }.first)
        #expect(recording.methods.withLock { $0.count } == 3)

        let contract = MethodIdentifier.Contract($Greeter.self)
        let first = try #require(try MethodIdentifier(greet).resolved(in: contract, for: GermanGreeter.self))
        let again = try #require(try MethodIdentifier(greet).resolved(in: contract, for: GermanGreeter.self))
        #expect(first === again)
        #expect(first.parameterCount == 1)
        // The same method served on another type resolves apart (its generic substitution is that type).
        let english = try #require(try MethodIdentifier(greet).resolved(in: contract, for: EnglishGreeter.self))
        #expect(english !== first)
        withExtendedLifetime((served, loopback)) {}
    }

    @Test("with the method kept resolved, Void results, thrown errors and state still reach the caller call after call")
    func keptResolvedCallsBehave() async throws {
        ExtensionActorSystem.register(error: GreetingError.self, as: "GreetingError")
        let (host, served, transport) = Self.serving { GermanGreeter(actorSystem: $0) }
        let greeter = try host.remoteObject($Greeter.self)
        for level in 1...3 {
            await #expect(throws: GreetingError.tooRude(level: level * 2 - 1)) { try await greeter.fail(registered: true) }
            try await greeter.fail(registered: false)
        }
        await #expect(throws: DistributedCallError.remote(code: 142, message: "refused with a code")) { try await greeter.refuse() }
        #expect(try await greeter.greet("x") == "hallo, x")
        withExtendedLifetime((served, transport)) {}
    }

    @Test("an identifier of another contract is not resolved, nor kept")
    func otherContractNotResolved() throws {
        let contract = MethodIdentifier.Contract($Greeter.self)
        let other = "$s" + (_mangledTypeName($Counter.self) ?? "") + "5greetyS2SYaKFTE"
        #expect(try MethodIdentifier(other).resolved(in: contract, for: GermanGreeter.self) == nil)
    }
}
