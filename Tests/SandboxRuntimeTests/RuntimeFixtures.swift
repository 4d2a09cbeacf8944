import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import TestSupport

/// What the runtime's tests add to the shared ``Fixtures``: the probe launched through the
/// runtime's own API rather than the CLI.
extension Fixtures {
    static func standardPolicy() throws -> Policy {
        try PolicyLoader.load(file: standardPolicyPath)
    }

    /// A configuration running the probe under the standard policy, output into `pipe`.
    static func probeConfiguration(_ arguments: [String], stdout: Int32? = nil) throws -> SandboxConfiguration {
        let policy = try standardPolicy()
        return SandboxConfiguration(
            executable: probe, arguments: ["xsb-probe"] + arguments,
            environment: SandboxEnvironment.compose(policy: policy, caller: ProcessInfo.processInfo.environment),
            policy: policy, standardInput: .null,
            standardOutput: stdout.map { .fileDescriptor(borrowed($0)) } ?? .null)
    }
}

/// A pipe whose read end collects what the sandbox writes.
final class OutputPipe: @unchecked Sendable {
    let readFD: Int32
    let writeFD: Int32

    init() {
        var fds: [Int32] = [0, 0]
        precondition(pipe(&fds) == 0)
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        readFD = fds[0]
        writeFD = fds[1]
    }

    /// Reads until a line containing `text` arrived or `seconds` passed (polling on a thread of
    /// its own, see ``offThePool(_:)``).
    func waitFor(_ text: String, seconds: Double = 10) async -> String {
        await offThePool { [self] in readUntil(text, seconds: seconds) }
    }

    private func readUntil(_ text: String, seconds: Double) -> String {
        var collected = ""
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline && !collected.contains(text) {
            var p = pollfd(fd: readFD, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 100) > 0 else { continue }
            let n = read(readFD, &buffer, buffer.count)
            if n <= 0 { break }
            collected += String(decoding: buffer[0..<n], as: UTF8.self)
        }
        return collected
    }

    private var writeOpen = true
    func closeWriteEnd() {
        if writeOpen { close(writeFD) }
        writeOpen = false
    }
    deinit {
        close(readFD)
        closeWriteEnd()
    }
}
