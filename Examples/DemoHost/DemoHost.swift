import ExtSandbox
import Foundation
import SandboxRuntime

/// `extsandbox-demo`: a host launches a sandboxed extension, talks to it, and shows its
/// lifecycle: launched, suspended, resumed, interrupted (with the reason), terminated.
@main
struct DemoHost {
    /// Unbuffered, so the host's lines and its callbacks' lines stay in order in a pipe too.
    static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func main() async {
        do {
            try await run()
        } catch {
            say("demo failed: \(error)")
            exit(1)
        }
    }

    static func run() async throws {
        let directory = URL(fileURLWithPath: PolicySearchPathHelper.executable).deletingLastPathComponent().path
        let point = AppExtensionPoint(name: "org.extsandbox.demo.text", securityLevel: "hardened")
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "org.extsandbox.demo.upcase", executablePath: directory + "/upcase-extension", point: point)
        let configuration = AppExtensionProcess.Configuration(
            identity: identity,
            onInterruption: { reason in say("  [host] onInterruption: \(reason)") },
            onEvent: { event in say("  [event] \(event)") },
            suspendAfter: .milliseconds(300))

        say("1. The host creates the extension process: a sandbox under the 'hardened' policy.")
        let process = try await AppExtensionProcess(configuration: configuration)
        say("   The extension runs as pid \(process.sandbox.pid) (its sandbox init; the program is pid \(process.sandbox.payloadPIDInside) inside).")

        say("2. It opens a connection and sends requests.")
        let connection = try await process.makeConnection()
        for text in ["hello from the host", "sandboxed extensions"] {
            let reply = try await connection.send(ExtensionMessage(Array(text.utf8)))
            say("   request \"\(text)\" -> reply \"\(String(decoding: reply.payload, as: UTF8.self))\"")
        }

        say("3. It closes the connection. With none open, the extension is suspended (every process stopped).")
        connection.invalidate()
        try await Task.sleep(for: .milliseconds(600))
        let states = process.sandbox.processIdentifiers().dropFirst().map { pid in
            (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)).flatMap { stat in
                stat.split(separator: ")").last?.split(separator: " ").first.map(String.init)
            } ?? "?"
        }
        say("   process states inside the sandbox: \(states.joined(separator: " ")) (T = stopped)")

        say("4. A new connection resumes it.")
        let second = try await process.makeConnection()
        let reply = try await second.send(ExtensionMessage(Array("awake again".utf8)))
        say("   reply \"\(String(decoding: reply.payload, as: UTF8.self))\"")

        say("5. The host asks for something the policy forbids: the extension tries to open a socket.")
        do {
            _ = try await second.send(ExtensionMessage(Array("open a socket".utf8)))
        } catch {
            say("   the pending request failed once: \(error)")
        }
        try await Task.sleep(for: .milliseconds(200))

        say("6. A later connection launches a fresh process.")
        let third = try await process.makeConnection()
        let again = try await third.send(ExtensionMessage(Array("fresh start".utf8)))
        say("   reply \"\(String(decoding: again.payload, as: UTF8.self))\" from pid \(process.sandbox.pid)")

        say("7. The host invalidates its connection and the process: the extension ends.")
        third.invalidate()
        process.invalidate()
        try await Task.sleep(for: .milliseconds(300))
        say("Done.")
    }
}

enum PolicySearchPathHelper {
    static var executable: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }
}
