import Distributed
import Synchronization

/// Turns a served call's outcome into its answer: the encoded result, or an ERROR.
public final class ExtensionResultHandler: DistributedTargetInvocationResultHandler, Sendable {
    public typealias SerializationRequirement = Codable

    private let outcome = Mutex<CallAnswer?>(nil)

    init() {}

    var answer: CallAnswer? { outcome.withLock { $0 } }

    public func onReturn<Success: Codable>(value: Success) async throws {
        record(value: value)
    }

    public func onReturnVoid() async throws {
        recordVoid()
    }

    public func onThrow<Err: Error>(error: Err) async throws {
        record(error: error)
    }

    // The synchronous forms, which `ResolvedMethod` calls: each `await` of an async function on
    // the serving path is a check of the task's executor preference under its status lock.

    func record<Success: Codable>(value: Success) {
        let answer: CallAnswer
        do {
            let descriptors = DescriptorTable()
            let result = try ValueCoding.encode(value, descriptors: descriptors)
            answer = .reply(result, fileDescriptors: descriptors.handOver())
        } catch {
            answer = .error(code: CallErrorCode.thrownError, message: "the result does not encode: \(error)")
        }
        outcome.withLock { $0 = answer }
    }

    func recordVoid() {
        outcome.withLock { $0 = .reply([], fileDescriptors: []) }
    }

    func record(error: any Error) {
        outcome.withLock { $0 = Self.answer(for: error) }
    }

    /// A registered error as itself; a coded one with its code; anything else as its description.
    /// (An argument that did not decode, and a method the runtime did not find, reach the handler
    /// as the method's error.)
    static func answer(for error: any Error) -> CallAnswer {
        if let undecodable = error as? ExtensionInvocationDecoder.ArgumentError {
            return .error(code: CallErrorCode.undecodableArguments, message: undecodable.description)
        }
        if let execution = error as? ExecuteDistributedTargetError {
            return execution.errorCode == .targetAccessorNotFound
                ? .error(code: CallErrorCode.unknownMethod, message: execution.message)
                : .error(code: CallErrorCode.undecodableArguments, message: execution.message)
        }
        if let message = RemoteErrorRegistry.shared.encode(error) {
            return .error(code: CallErrorCode.registeredError, message: message)
        }
        if let coded = error as? any CodedCallError {
            return .error(code: coded.code, message: coded.message)
        }
        return .error(code: CallErrorCode.thrownError, message: "\(error)")
    }
}
