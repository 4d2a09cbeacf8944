import ExtSandboxExtension
import Glibc

/// The demo's extension: upper-cases text. It runs under the `hardened` policy, like a parser of
/// untrusted input would. Asked to "open a socket", it tries, to show what the sandbox does.
@main
struct UpcaseExtension: AppExtension {
    func handle(request: Message) async throws -> Message {
        for fd in request.fileDescriptors { close(fd) }
        let text = String(decoding: request.payload, as: UTF8.self)
        if text == "open a socket" {
            _ = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)  // hardened: the sandbox dies here
        }
        return Message(Array(text.uppercased().utf8))
    }
}
