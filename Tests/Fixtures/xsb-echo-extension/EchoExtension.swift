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
///   "ask-host TEXT" sends TEXT to the host as a request; replies "host said: REPLY" or "host error CODE"
///   "tell-host TEXT" sends TEXT to the host as a one-way message; replies "told"
///   "ask-host-cancel" asks the host "slow", cancels that after 100 ms, replies with the outcome
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
                if fstat(fd.rawValue, &info) == 0 { size = Int(info.st_size) }
            }
            for fd in request.fileDescriptors { fd.close() }
            return Message(Array("\(size)".utf8))
        case "fail":
            throw ExtensionFailure(code: 123, "asked to fail")
        case "ask-host", "tell-host", "ask-host-cancel":
            guard let host = HostConnection.current else { return Message(Array("no host connection".utf8)) }
            let rest = Array(text.utf8.dropFirst(words[0].utf8.count + 1))
            if words[0] == "tell-host" {
                try host.sendOneWay(Message(rest))
                return Message(Array("told".utf8))
            }
            let outcome: String
            do {
                if words[0] == "ask-host-cancel" {
                    let asking = Task { try await host.send(Message(Array("slow".utf8))) }
                    try await Task.sleep(nanoseconds: 100_000_000)
                    asking.cancel()
                    _ = try await asking.value
                    outcome = "not cancelled"
                } else {
                    outcome = "host said: " + String(decoding: try await host.send(Message(rest)).payload, as: UTF8.self)
                }
            } catch HostRequestError.remote(let code, _) {
                outcome = "host error \(code)"
            } catch HostRequestError.cancelled {
                outcome = "cancelled"
            }
            return Message(Array(outcome.utf8))
        default:
            break
        }
        for fd in request.fileDescriptors { fd.close() }
        return Message(request.payload)
    }
}
