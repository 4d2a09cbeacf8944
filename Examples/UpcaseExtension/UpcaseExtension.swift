import ExtSandboxExtension
import Glibc
import UpcaseContract

/// The demo's extension: it serves the `Upcasing` contract on every connection. It runs under the
/// `hardened` policy, like a parser of untrusted input would.
@main
struct UpcaseExtension: AppExtension {
    func exportedObject(_ system: ExtensionActorSystem) -> ExportedObject? {
        ExportedObject(Upcaser(actorSystem: system), as: $Upcasing.self)
    }
}

distributed actor Upcaser: Upcasing {
    distributed func upcase(_ text: String) -> String { text.uppercased() }

    distributed func openSocket() {
        _ = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)  // hardened: the sandbox dies here
    }
}
