import ExtSandboxExtension
import Glibc

/// Test fixture: an extension built with the SDK. Requests are commands:
///   anything else   echoed back
///   "crash"         SIGSEGV (an interruption by a crash)
///   "exit N"        exits with N
///   "sleep MS"      replies after MS milliseconds (cancellable)
///   "socket"        calls socket(), which restricted/hardened forbid
///   "memfd"         replies with the byte size of the attached file descriptor
///   "fail"          answers an error (code 123)
/// Connections whose host name is "reject-me" are rejected.
@main
struct EchoExtension: AppExtension {
    func accept(_ connection: ConnectionRequest) -> Bool {
        connection.hostName != "reject-me"
    }

    func handle(request: Message) async throws -> Message {
        let text = String(decoding: request.payload, as: UTF8.self)
        let words = text.split(separator: " ")
        switch words.first {
        case "crash":
            raise(SIGSEGV)
        case "exit":
            exit(Int32(words.dropFirst().first ?? "0") ?? 0)
        case "sleep":
            let ms = UInt64(words.dropFirst().first ?? "0") ?? 0
            try await Task.sleep(nanoseconds: ms * 1_000_000)
        case "socket":
            _ = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        case "memfd":
            var size = -1
            if let fd = request.fileDescriptors.first {
                var info = stat()
                if fstat(fd, &info) == 0 { size = Int(info.st_size) }
            }
            for fd in request.fileDescriptors { close(fd) }
            return Message(Array("\(size)".utf8))
        case "fail":
            throw ExtensionFailure(code: 123, "asked to fail")
        default:
            break
        }
        for fd in request.fileDescriptors { close(fd) }
        return Message(request.payload)
    }
}
