// The byte-level extension of ExtSandboxExtension.docc's getting-started article, verbatim
// (ExtSandboxTests' ReadmeSnippetTests checks that it stays so). Only compiled.
import ExtSandboxExtension

struct UpcaseBytes: AppExtension {
    func handle(request: Message) async throws -> Message {
        Message(Array(String(decoding: request.payload, as: UTF8.self).uppercased().utf8))
    }
}
