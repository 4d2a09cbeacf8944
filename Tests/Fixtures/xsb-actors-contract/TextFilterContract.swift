import Distributed
import ExtSandboxActors

/// The typed contract between the test hosts and the actors fixture: what the extension serves.
@Resolvable
public protocol TextFilter: DistributedActor where ActorSystem == ExtensionActorSystem {
    /// The text, upper-cased when `options.shout`; throws ``FilterError/tooLong(limit:)`` over `options.limit`.
    distributed func apply(_ text: String, options: FilterOptions) async throws -> String
    /// Sleeps, then says whether the sleep was cancelled (it returns early if so).
    distributed func sleep(milliseconds: Int) async throws -> Bool
    /// Throws an error the contract does not register.
    distributed func failPlainly() async throws
    /// Crashes the extension (SIGSEGV) in the middle of the call.
    distributed func crash() async throws
    /// Calls the host's ``HostNotes/note(_:)`` on the same connection and returns its answer.
    distributed func askHost(_ text: String) async throws -> String
    /// How many calls of ``sleep(milliseconds:)`` saw their cancellation.
    distributed func cancelledSleeps() async throws -> Int
    /// The byte size of a file the host passes.
    distributed func size(of file: TransferredFileDescriptor) async throws -> Int
    /// How many bytes it was given (the benchmark's bulk call).
    distributed func count(_ bytes: [UInt8]) async throws -> Int
    /// The bytes it was given (an exact round trip of an argument and a result of any size).
    distributed func echo(_ bytes: [UInt8]) async throws -> [UInt8]
    /// The read end of a pipe that holds `text` (its write end closed).
    distributed func file(containing text: String) async throws -> TransferredFileDescriptor
}

/// What the host serves to the extension on a connection.
@Resolvable
public protocol HostNotes: DistributedActor where ActorSystem == ExtensionActorSystem {
    distributed func note(_ text: String) async throws -> String
}

public struct FilterOptions: Codable, Sendable, Equatable {
    public var shout: Bool
    public var limit: Int?

    public init(shout: Bool = true, limit: Int? = nil) {
        self.shout = shout
        self.limit = limit
    }
}

/// The contract's own error: registered on both sides, it comes back as itself.
public enum FilterError: Error, Codable, Equatable {
    case tooLong(limit: Int)
}

public enum TextFilterContract {
    /// Registers the contract's errors (both sides call it once).
    public static func register() {
        ExtensionActorSystem.register(error: FilterError.self, as: "FilterError")
    }
}
