// README.md's typed contract, verbatim (ReadmeSnippetTests checks that it stays so).

// The contract: a library target both depend on (a module of its own: see below)
import Distributed
import ExtSandboxActors

@Resolvable
public protocol TextTransform: DistributedActor where ActorSystem == ExtensionActorSystem {
    distributed func apply(_ text: String) async throws -> String
}
