// README.md's extension, verbatim (ReadmeSnippetTests checks that it stays so, and runs it).

// The extension: an executable target that depends on ExtSandboxExtension and the contract
import ExtSandboxExtension
import TextTransformContract

distributed actor Upcaser: TextTransform {
    distributed func apply(_ text: String) -> String { text.uppercased() }
}

@main struct Upcase: AppExtension {
    func exportedObject(_ system: ExtensionActorSystem) -> ExportedObject? {
        ExportedObject(Upcaser(actorSystem: system), as: $TextTransform.self)
    }
}
