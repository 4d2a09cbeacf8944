// README.md's typed contract, verbatim (ReadmeSnippetTests checks that it stays so).

// The contract: a library target of its own, which both depend on
import Distributed
import ExtSandboxActors

@Resolvable
public protocol TextTransform: DistributedActor where ActorSystem == ExtensionActorSystem {
    distributed func apply(_ text: String) async throws -> String
}
