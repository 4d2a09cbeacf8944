import Distributed
import ExtSandboxActors
import Testing

@Resolvable
protocol Greeter: DistributedActor where ActorSystem == ExtensionActorSystem {
    distributed func greet(_ name: String) async throws -> String
    distributed func fail(registered: Bool) async throws
    distributed func refuse() async throws
}

/// A protocol of the same shape that the served object does not conform to.
@Resolvable
protocol Counter: DistributedActor where ActorSystem == ExtensionActorSystem {
    distributed func greet(_ name: String) async throws -> String
}

/// No `typealias ActorSystem`: the protocol's constraint names it (as in the README).
distributed actor EnglishGreeter: Greeter {
    distributed func greet(_ name: String) -> String { "hello, \(name)" }
    distributed func fail(registered: Bool) throws {
        if registered { throw GreetingError.tooRude(level: 3) }
        throw PlainError()
    }
    distributed func refuse() throws { throw CodedRefusal() }
}

/// Another type with a method of the same shape, and state its method writes.
distributed actor FrenchGreeter: Greeter {
    typealias ActorSystem = ExtensionActorSystem
    var rudeness = 0
    distributed func greet(_ name: String) -> String { "bonjour, \(name)" }
    distributed func fail(registered: Bool) throws { rudeness += 1 }
    distributed func refuse() throws {}
}

enum GreetingError: Error, Codable, Equatable {
    case tooRude(level: Int)
}

/// An error with the application's own wire code, as the SDK's and the host's `ExtensionFailure` are.
struct CodedRefusal: CodedCallError {
    var code: UInt32 { 142 }
    var message: String { "refused with a code" }
}

struct PlainError: Error, CustomStringConvertible {
    var description: String { "plain failure" }
}

/// A connection in memory: each call is served by the peer system at once.
final class Loopback: CallTransport {
    let peer: ExtensionActorSystem
    init(peer: ExtensionActorSystem) { self.peer = peer }
    func call(_ envelope: [UInt8], fileDescriptors: [Int32]) async throws -> CallAnswer {
        await peer.serve(envelope, fileDescriptors: fileDescriptors)
    }
}

@Suite("Distributed calls between two actor systems in memory")
struct LoopbackTests {
    /// A host system calling an extension system that exports an English greeter as `$Greeter`.
    static func connected() -> (host: ExtensionActorSystem, served: EnglishGreeter, transport: Loopback) {
        let host = ExtensionActorSystem(side: .host), ext = ExtensionActorSystem(side: .extension)
        let transport = Loopback(peer: ext)
        host.attach(transport)
        let served = EnglishGreeter(actorSystem: ext)
        ext.export(ExportedObject(served, as: $Greeter.self))
        return (host, served, transport)
    }

    @Test("a call returns; a registered error comes back as itself, a coded one with its code, a plain one as its description")
    func roundTrip() async throws {
        ExtensionActorSystem.register(error: GreetingError.self, as: "GreetingError")
        let (host, served, transport) = Self.connected()
        let greeter = try host.remoteObject($Greeter.self)
        #expect(try await greeter.greet("world") == "hello, world")
        await #expect(throws: GreetingError.tooRude(level: 3)) { try await greeter.fail(registered: true) }
        await #expect(throws: DistributedCallError.remote(code: CallErrorCode.thrownError, message: "plain failure")) {
            try await greeter.fail(registered: false)
        }
        await #expect(throws: DistributedCallError.remote(code: 142, message: "refused with a code")) { try await greeter.refuse() }
        withExtendedLifetime((served, transport)) {}
    }

    @Test("a method of a protocol the object does not conform to is an unknown method")
    func otherProtocol() async throws {
        let (host, served, transport) = Self.connected()
        let counter = try host.remoteObject($Counter.self)
        await #expect {
            _ = try await counter.greet("x")
        } throws: { error in
            guard case DistributedCallError.unknownMethod = error else { return false }
            return true
        }
        withExtendedLifetime((served, transport)) {}
    }

    @Test("another type's method, named by its identifier, is refused and never runs on the object")
    func otherConcreteType() async throws {
        let (host, served, transport) = Self.connected()
        // A remote reference typed as the other concrete actor: its calls carry that type's identifiers.
        let french = try FrenchGreeter.resolve(id: .extension, using: host)
        await #expect {
            _ = try await french.greet("x")
        } throws: { error in
            guard case DistributedCallError.unknownMethod = error else { return false }
            return true
        }
        withExtendedLifetime((served, transport)) {}
    }

    @Test("a call to a name nothing is exported under is an unknown target; without an export too")
    func unknownTarget() async throws {
        let (host, served, transport) = Self.connected()
        let stranger = try $Greeter.resolve(id: ExtensionActorID("stranger"), using: host)
        await #expect(throws: DistributedCallError.unknownTarget("no object named stranger")) { _ = try await stranger.greet("x") }
        withExtendedLifetime(served) {}
        let empty = ExtensionActorSystem(side: .host), toNobody = Loopback(peer: ExtensionActorSystem(side: .extension))
        empty.attach(toNobody)
        let nobody = try empty.remoteObject($Greeter.self)
        await #expect(throws: DistributedCallError.unknownTarget("no object named extension")) { _ = try await nobody.greet("x") }
        withExtendedLifetime((transport, toNobody)) {}
    }

    @Test("a call with no connection attached fails as not sent")
    func detached() async throws {
        let host = ExtensionActorSystem(side: .host)
        let greeter = try host.remoteObject($Greeter.self)
        await #expect {
            _ = try await greeter.greet("x")
        } throws: { error in
            guard case DistributedCallError.notSent = error else { return false }
            return true
        }
    }
}

extension LoopbackTests {
    /// The runtime resolves the types a method identifier spells without checking them: before
    /// identifiers were looked up by exact name first, some of these crashed the process.
    @Test("identifiers that begin as the contract's methods but are garbage after are unknown methods, never a crash")
    func garbageIdentifiers() async throws {
        let (_, served, transport) = Self.connected()
        let prefix = "$s" + (_mangledTypeName($Greeter.self) ?? "")
        let real = "$s21ExtSandboxActorsTests8$GreeterC5greetyS2SYaKFTE"
        // Letters, digits and the control bytes with which mangled names refer to symbols by address.
        let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$\u{1}\u{2}\u{9}\u{17}\u{1f}".utf8)
        var state: UInt64 = 0x9e37_79b9_7f4a_7c15
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        for _ in 0..<20000 {
            // A mutation of the real identifier's middle, or random text, between the prefix and TE.
            var middle = Array(real.utf8.dropFirst(prefix.utf8.count).dropLast(2))
            if next(2) == 0 {
                middle = (0..<next(40)).map { _ in alphabet[next(alphabet.count)] }
            } else {
                for _ in 0..<1 + next(4) where !middle.isEmpty { middle[next(middle.count)] = alphabet[next(alphabet.count)] }
            }
            let method = prefix + String(decoding: middle, as: UTF8.self) + "TE"
            let envelope = try CallEnvelope(target: "extension", method: method, arguments: [ValueCoding.encode("x")[...]]).encoded()
            // Only a mutation that happens to give the real identifier back is served.
            switch await transport.peer.serve(envelope, fileDescriptors: []) {
            case .reply: #expect(method == real, "served \(method)")
            case .error(let code, let message): #expect([CallErrorCode.unknownMethod, CallErrorCode.undecodableArguments].contains(code), "\(method): \(code) \(message)")
            }
        }
        withExtendedLifetime(served) {}
    }
}

extension LoopbackTests {
    /// The system target (docs/wire-protocol.md §12.4) is served by either side, whether or not
    /// it exports an object: `extsandbox test` pings it to tell a typed extension from a byte-level one.
    @Test("the system target echoes a ping's argument; another method is ERROR 22, another argument count ERROR 23")
    func systemTarget() async throws {
        let argument = try ValueCoding.encode("hi")
        let ping = try SystemTarget.pingEnvelope(argument)
        // The document's example, byte for byte.
        #expect(ping == [0x01, 0x00, 0x00, 0x06] + Array("system".utf8) + [0x00, 0x04] + Array("ping".utf8)
            + [0x00, 0x01, 0x00, 0x00, 0x00, 0x07, 0x06, 0x00, 0x00, 0x00, 0x02, 0x68, 0x69])
        let (_, served, transport) = Self.connected()
        for system in [transport.peer, ExtensionActorSystem(side: .host)] {
            #expect(await system.serve(ping, fileDescriptors: []) == .reply(argument, fileDescriptors: []))
            let other = try CallEnvelope(target: "system", method: "$s4Demo11$TextFilterC5applyyS2SYaKFTE", arguments: []).encoded()
            guard case .error(CallErrorCode.unknownMethod, _) = await system.serve(other, fileDescriptors: []) else {
                Issue.record("another method of the system target")
                continue
            }
            let two = try CallEnvelope(target: "system", method: "ping", arguments: [argument[...], argument[...]]).encoded()
            guard case .error(CallErrorCode.undecodableArguments, _) = await system.serve(two, fileDescriptors: []) else {
                Issue.record("a ping of two arguments")
                continue
            }
        }
        // The unknown-method probe on the exported object: ERROR 22.
        let missing = try CallEnvelope(target: "extension", method: "extsandbox-test.no-such-method", arguments: []).encoded()
        guard case .error(CallErrorCode.unknownMethod, _) = await transport.peer.serve(missing, fileDescriptors: []) else {
            Issue.record("a method that cannot exist")
            return
        }
        withExtendedLifetime(served) {}
    }
}
