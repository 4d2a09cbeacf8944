import Distributed

/// Hands a received call's arguments to the method, decoding each from its encoded value.
public struct ExtensionInvocationDecoder: DistributedTargetInvocationDecoder {
    public typealias SerializationRequirement = Codable

    /// Thrown when an argument is missing or does not decode: the callee answers
    /// ``CallErrorCode/undecodableArguments``.
    struct ArgumentError: Error, CustomStringConvertible {
        let description: String
    }

    private let arguments: [ArraySlice<UInt8>]
    /// The last argument's byte array when it was received apart (``CallEnvelope/trailingBytes``).
    private let trailingBytes: [UInt8]
    private let actorType: any DistributedActor.Type
    /// The call's file descriptors: those no argument takes are closed with the table.
    private let descriptors: DescriptorTable
    private var next = 0

    /// The arguments of a call on an actor of `actorType`: the `Self` of the contract's
    /// protocol, the only generic parameter a served method may have.
    init(arguments: [ArraySlice<UInt8>], trailingBytes: [UInt8] = [], actorType: any DistributedActor.Type, descriptors: DescriptorTable) {
        self.arguments = arguments
        self.trailingBytes = trailingBytes
        self.actorType = actorType
        self.descriptors = descriptors
    }

    public mutating func decodeGenericSubstitutions() throws -> [Any.Type] { [actorType] }

    public mutating func decodeNextArgument<Argument: Codable>() throws -> Argument {
        guard next < arguments.count else {
            throw ArgumentError(description: "argument \(next) missing (\(arguments.count) sent)")
        }
        defer { next += 1 }
        do {
            if next == arguments.count - 1, !trailingBytes.isEmpty {
                return try ValueCoding.decode(Argument.self, fromByteArray: trailingBytes, descriptors: descriptors)
            }
            return try ValueCoding.decode(Argument.self, from: arguments[next], descriptors: descriptors)
        } catch {
            throw ArgumentError(description: "argument \(next) is not a \(Argument.self): \(error)")
        }
    }

    public mutating func decodeErrorType() throws -> Any.Type? { nil }

    public mutating func decodeReturnType() throws -> Any.Type? { nil }
}
