import Distributed

// Why this file calls the Distributed runtime's own entry points: the public
// `DistributedActorSystem.executeDistributedTarget` resolves the method from its mangled name on
// every call (its generic environment, witness tables, parameter count, parameter types and
// return type, the last three each by demangling the whole name), which was most of what serving
// a small call cost. Those depend only on the method and the object's type, so they are resolved
// here once per pair and kept; each call then makes the one runtime call that runs the method
// (`swift_distributed_execute_target`, declared below exactly as the Distributed module declares
// it for itself) and hands the result to the handler as the public entry point does. Only names
// that `MethodIdentifier` found among the process's compiled accessors get here.

/// The runtime's call of a distributed method through its accessor, which it finds by name (the
/// Distributed module's own declaration of it).
@_silgen_name("swift_distributed_execute_target")
private func executeDistributedAccessor<Decoder: DistributedTargetInvocationDecoder>(
    on actor: AnyObject,
    _ targetName: UnsafePointer<UInt8>, _ targetNameLength: UInt,
    argumentDecoder: inout Decoder,
    argumentTypes: UnsafeRawPointer,
    resultBuffer: UnsafeMutableRawPointer,
    substitutions: UnsafeRawPointer?,
    witnessTables: UnsafeRawPointer?,
    numWitnessTables: UInt
) async throws

/// A served method resolved for one type of object: what the runtime needs to call it, kept for
/// the process's life (there are as many as compiled accessors times exported types).
final class ResolvedMethod: @unchecked Sendable {
    // @unchecked: the buffers are filled before `init` and only read after; `deinit` frees them.

    /// What the runtime reads on each call, in buffers this object owns.
    private struct Buffers {
        /// The mangled name, as the runtime looks its accessor up by (with its length: no NUL).
        var name: UnsafeMutableBufferPointer<UInt8>
        /// The substitution of the contract's `Self` (the object's type), when the method is generic.
        var substitutions: UnsafeMutablePointer<Any.Type>?
        var witnessTables: UnsafeRawPointer?
        var witnessTableCount = 0
        var parameterTypes = UnsafeMutableBufferPointer<Any.Type>(start: nil, count: 0)

        func deallocate() {
            name.deallocate()
            substitutions?.deinitialize(count: 1).deallocate()
            witnessTables?.deallocate()
            parameterTypes.deallocate()
        }
    }

    /// The method's number of parameters.
    let parameterCount: Int
    private let buffers: Buffers
    private let result: any ResultDelivery.Type

    private init(_ buffers: Buffers, result: any ResultDelivery.Type) {
        self.buffers = buffers
        self.parameterCount = buffers.parameterTypes.count
        self.result = result
    }

    deinit {
        buffers.deallocate()
    }

    /// Resolves `identifier` (the name of a compiled distributed accessor) for objects of
    /// `actorType`; throws as `executeDistributedTarget` does when the types do not resolve.
    static func resolve(_ identifier: String, for actorType: any DistributedActor.Type) throws(ExecuteDistributedTargetError) -> ResolvedMethod {
        let utf8 = Array(identifier.utf8)
        var buffers = Buffers(name: .allocate(capacity: utf8.count))
        _ = buffers.name.initialize(from: utf8)
        var resolved = false
        defer { if !resolved { buffers.deallocate() } }
        let start = UnsafePointer(buffers.name.baseAddress!), length = UInt(utf8.count)
        let environment = _getGenericEnvironmentOfDistributedTarget(start, length)
        if let environment {
            let substitution = UnsafeMutablePointer<Any.Type>.allocate(capacity: 1)
            substitution.initialize(to: actorType)
            buffers.substitutions = substitution
            (buffers.witnessTables, buffers.witnessTableCount) = _getWitnessTablesFor(environment: environment, genericArguments: substitution)
            guard buffers.witnessTableCount >= 0 else {
                throw ExecuteDistributedTargetError(message: "\(actorType) does not satisfy the generic requirements of \(identifier)",
                                                    errorCode: .invalidGenericSubstitutions)
            }
        }
        let count = __getParameterCount(start, length)
        guard count >= 0 else {
            throw ExecuteDistributedTargetError(message: "no parameter count for \(identifier) (error \(count))", errorCode: .invalidParameterCount)
        }
        buffers.parameterTypes = .allocate(capacity: Int(count))
        let decoded = __getParameterTypeInfo(start, length, environment, buffers.substitutions,
                                             buffers.parameterTypes.baseAddress!._rawValue, Int(count))
        guard decoded == count else {
            throw ExecuteDistributedTargetError(message: "\(decoded) of \(count) parameter types of \(identifier) resolved",
                                                errorCode: .invalidParameterCount)
        }
        guard let returnType = __getReturnTypeInfo(start, length, environment, buffers.substitutions) else {
            throw ExecuteDistributedTargetError(message: "no return type for \(identifier)", errorCode: .typeDeserializationFailure)
        }
        let result: any ResultDelivery.Type
        if returnType == Void.self {
            result = VoidDelivery.self
        } else if let codable = returnType as? any Codable.Type {
            result = delivery(of: codable)
        } else {
            throw ExecuteDistributedTargetError(message: "the result of \(identifier), \(returnType), is not Codable",
                                                errorCode: .typeDeserializationFailure)
        }
        resolved = true
        return ResolvedMethod(buffers, result: result)
    }

    private static func delivery<Result: Codable>(of _: Result.Type) -> any ResultDelivery.Type {
        ValueDelivery<Result>.self
    }

    /// Calls the method on `actor` (of the type it was resolved for) with `decoder`'s arguments,
    /// and gives its result or error to `handler`, as `executeDistributedTarget` does.
    func execute(on actor: AnyObject, decoder: inout ExtensionInvocationDecoder, handler: ExtensionResultHandler) async {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(result.size, 1), alignment: result.alignment)
        defer { buffer.deallocate() }
        do {
            try await executeDistributedAccessor(
                on: actor, buffers.name.baseAddress!, UInt(buffers.name.count), argumentDecoder: &decoder,
                argumentTypes: UnsafeRawPointer(buffers.parameterTypes.baseAddress!), resultBuffer: buffer,
                substitutions: UnsafeRawPointer(buffers.substitutions), witnessTables: buffers.witnessTables,
                numWitnessTables: UInt(buffers.witnessTableCount))
        } catch {
            // The method threw (or an argument did not decode): the buffer holds nothing.
            handler.record(error: error)
            return
        }
        // The buffer now holds the result, which delivering moves out of it.
        result.deliver(from: buffer, to: handler)
    }
}

/// How a method's result leaves its buffer for the handler: one conformance per result type,
/// chosen when the method is resolved.
private protocol ResultDelivery {
    static var size: Int { get }
    static var alignment: Int { get }
    /// Moves the result out of `buffer` (left uninitialized) and hands it to `handler`.
    static func deliver(from buffer: UnsafeMutableRawPointer, to handler: ExtensionResultHandler)
}

private enum VoidDelivery: ResultDelivery {
    static var size: Int { 0 }
    static var alignment: Int { 1 }
    static func deliver(from buffer: UnsafeMutableRawPointer, to handler: ExtensionResultHandler) {
        handler.recordVoid()
    }
}

private enum ValueDelivery<Result: Codable>: ResultDelivery {
    static var size: Int { MemoryLayout<Result>.size }
    static var alignment: Int { MemoryLayout<Result>.alignment }
    static func deliver(from buffer: UnsafeMutableRawPointer, to handler: ExtensionResultHandler) {
        handler.record(value: buffer.assumingMemoryBound(to: Result.self).move())
    }
}
