import Distributed
import ExtSandboxActors

/// The demo's contract, shared by the host (Examples/DemoHost) and its extension
/// (Examples/UpcaseExtension): what the extension serves, called through a proxy.
@Resolvable
public protocol Upcasing: DistributedActor where ActorSystem == ExtensionActorSystem {
    /// The text, upper-cased.
    distributed func upcase(_ text: String) async throws -> String
    /// Tries to open a network socket, as a compromised parser might: under the `hardened`
    /// policy the sandbox is killed in the middle of the call.
    distributed func openSocket() async throws
}
