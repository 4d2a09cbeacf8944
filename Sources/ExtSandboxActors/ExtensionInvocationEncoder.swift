import Distributed

/// Records a call's arguments as encoded values (§12.2 of docs/wire-protocol.md), for its envelope. Generic distributed methods are not
/// supported: their type names would have to travel, and no other language could read them.
/// The one substitution a call through a `@Resolvable` proxy records, the proxy's own type for
/// the protocol's `Self`, does not travel: the callee substitutes its own object's type.
public struct ExtensionInvocationEncoder: DistributedTargetInvocationEncoder {
    public typealias SerializationRequirement = Codable

    /// The arguments, serialized into the envelope when the call is sent.
    var arguments: [WireValue] = []
    /// The copies of the arguments' file descriptors, sent with the call's frame.
    let descriptors = DescriptorTable()
    private var substitutions = 0

    public mutating func recordGenericSubstitution<T>(_ type: T.Type) throws {
        substitutions += 1
        guard substitutions > 1 || !(type is any DistributedActor.Type) else { return }
        throw DistributedCallError.notSent("generic distributed methods are not supported (substitution \(type))")
    }

    public mutating func recordArgument<Value: Codable>(_ argument: RemoteCallArgument<Value>) throws {
        do {
            arguments.append(try WireValueEncoder(descriptors: descriptors).encode(argument.value))
        } catch {
            throw DistributedCallError.notSent("argument \(argument.label ?? argument.name) does not encode: \(error)")
        }
    }

    public mutating func recordErrorType<E: Error>(_ type: E.Type) throws {}

    public mutating func recordReturnType<R: Codable>(_ type: R.Type) throws {}

    public mutating func doneRecording() throws {}
}
