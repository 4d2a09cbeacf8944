import SandboxExec
import ExtSandbox

/// What to change, for each way a check can fail (docs/wire-protocol.md has the rules).
extension ConformanceRun {
    static func fix(forRefusal refusal: String) -> String? {
        if refusal.contains("extsandbox approve") || refusal.contains("extsandbox enable") || refusal.contains("--policy") { return nil }
        return "fix the manifest or bundle as the message says (docs/extensions.md, Extension bundles)"
    }

    static func fix(forLaunchFailure error: any Error, identifier: String) -> String? {
        switch error {
        case ExtensionError.endedBeforeReady(.seccompViolation(let syscall)):
            return "it was killed for calling \(syscall ?? "a forbidden system call") before READY; do without it, or ask for a point whose security level allows it"
        case ExtensionError.endedBeforeReady(let termination):
            return "stay running and send READY (kind 9, id 0) with the identifier \(identifier) on fd 3 once ready to accept connections; it \(termination) first (\(protocolDoc) §7)"
        case ExtensionError.notReadyInTime:
            return "send READY (kind 9, id 0) with the identifier \(identifier) on fd 3 as soon as it can accept connections (\(protocolDoc) §7)"
        case ExtensionError.discovery(.identifierMismatch):
            return "READY must carry exactly $EXTSANDBOX_EXTENSION_IDENTIFIER (\(identifier)), the manifest's identifier (\(protocolDoc) §7)"
        default:
            // Its policy, its sandbox or its bundle: the advice `run` and `exec` give.
            return ErrorAdvice.extensionLaunch(error)
        }
    }

    static func fix(forHandshake error: any Error, timeout: Double) -> String? {
        let text = "\(error)"
        if text.contains("unsupported protocol version") {
            return "answer the host's HELLO with a HELLO of protocol version 1 (\(protocolDoc) §5)"
        }
        if text.contains("did not answer the handshake") {
            return "answer the host's HELLO on each new connection with a HELLO (version 1, its maximum frame size) or an ERROR id 0, within \(timeout == timeout.rounded() ? String(Int(timeout)) : String(timeout)) s (\(protocolDoc) §5)"
        }
        if case ExtensionError.interrupted(let termination) = error {
            return "the extension ended during the handshake (\(termination)): take the socket from CONNECT and answer its HELLO (\(protocolDoc) §5, §7)"
        }
        return "answer the host's HELLO as \(protocolDoc) §5 says"
    }

    static func fix(forRequest error: any Error, fileDescriptor: Bool, timeout: Double) -> String? {
        switch error {
        case is Conversation.NoReply:
            return "answer every REQUEST with exactly one REPLY or ERROR carrying its id (\(protocolDoc) §3)"
        case ExtensionError.interrupted(.seccompViolation(let syscall)):
            return "it was killed for calling \(syscall ?? "a forbidden system call") (see the seccomp check)"
        case ExtensionError.interrupted(let termination):
            return "it ended while handling the request (\(termination)): reproduce with `extsandbox run BUNDLE --send TEXT` and fix the crash"
        default:
            return fileDescriptor
                ? "read frames with recvmsg and take the SCM_RIGHTS file descriptors with the frame that declares them (\(protocolDoc) §4)"
                : "answer requests as \(protocolDoc) §3 says"
        }
    }
}
