import ExtSandbox
import Foundation
import SandboxRuntime
import UpcaseContract

/// The demo host's two extension points: one for its own (bundled) extensions under `hardened`,
/// one open to extensions installed anywhere (once the owner approves them) under `standard`.
extension AppExtensionPoint {
    @Definition static var upcase: AppExtensionPoint {
        Name("org.extsandbox.demo.upcase")
        UserInterface(false)
        Scope(restriction: .application)
        SecurityLevel("hardened")
    }

    @Definition static var echo: AppExtensionPoint {
        Name("org.extsandbox.demo.echo")
        Scope(restriction: .none)
        SecurityLevel("standard")
    }
}

/// `extsandbox-demo`: a host discovers its extensions (a bundled one, an external one the owner
/// approves with the CLI meanwhile), launches them in their sandboxes, calls the bundled one
/// through a typed proxy (the `Upcasing` contract) and the external one in bytes, shows a
/// process's lifecycle (suspended, resumed, interrupted with the reason), and sees the external
/// extension unapproved again once its executable is replaced.
///
///     extsandbox-demo --write-extension-points FILE   # the declaration file, from the definitions
///     extsandbox-demo                                 # the story (scripts/demo drives it)
@main
struct DemoHost {
    /// Unbuffered, so the host's lines and its callbacks' lines stay in order in a pipe too.
    static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static let host = AppExtensionHost(identifier: "org.extsandbox.demo")
    static let points: [AppExtensionPoint] = [.upcase, .echo]

    static func main() async {
        do {
            let arguments = CommandLine.arguments
            if let index = arguments.firstIndex(of: "--write-extension-points"), index + 1 < arguments.count {
                try host.writeDeclaration(points: points, to: arguments[index + 1])
                say("wrote the declaration of \(points.map(\.name).joined(separator: ", ")) to \(arguments[index + 1])")
                return
            }
            try await run()
        } catch {
            say("demo failed: \(error)")
            exit(1)
        }
    }

    static func describe(_ state: AppExtensionPoint.Monitor.State) -> String {
        let names = state.identities.map { "\($0.bundleIdentifier) \($0.version) for \($0.point.name) (\($0.point.securityLevel))" }
        return "enabled: [\(names.joined(separator: ", "))], unapproved: \(state.unapprovedCount), disabled: \(state.disabledCount), invalid: \(state.invalid.count)"
    }

    /// The next state from `updates` that satisfies `condition` (or nil after `seconds`).
    static func wait(for updates: AsyncStream<AppExtensionPoint.Monitor.State>, seconds: Double,
                     _ condition: @escaping @Sendable (AppExtensionPoint.Monitor.State) -> Bool) async -> AppExtensionPoint.Monitor.State? {
        await withTaskGroup(of: AppExtensionPoint.Monitor.State?.self) { group in
            group.addTask {
                for await state in updates where condition(state) { return state }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    static func text(_ message: ExtensionMessage) -> String { String(decoding: message.payload, as: UTF8.self) }

    static func run() async throws {
        say("Host \(host.identifier), bundle \(host.locations.hostBundle ?? "-")")
        say("  external extensions in: \(host.locations.external.joined(separator: ", "))")
        say("  the owner's approvals:   \(host.locations.stateFile)")

        say("1. The host starts a monitor for its two points and gets a validated snapshot.")
        let monitor = try await AppExtensionPoint.Monitor(points: points, host: host)
        say("   \(describe(monitor.state))")
        for problem in monitor.state.invalid { say("   invalid: \(problem)") }

        guard let upcase = monitor.identities.first(where: { $0.point == .upcase }) else {
            say("   the bundled extension is missing")
            exit(1)
        }
        let configuration = AppExtensionProcess.Configuration(
            identity: upcase,
            onInterruption: { reason in say("  [host] onInterruption: \(reason)") },
            onEvent: { event in say("  [event] \(event)") },
            suspendAfter: .milliseconds(300))

        say("2. It launches its bundled extension \(upcase.bundleIdentifier) (\(upcase.displayName)) in a 'hardened' sandbox.")
        let process = try await AppExtensionProcess(configuration: configuration)
        say("   The extension runs as pid \(process.sandbox.pid) (its sandbox init; the program is pid \(process.sandbox.payloadPIDInside) inside).")
        say("   It calls the extension's exported object through a proxy typed by the shared @Resolvable protocol:")
        say("     let upcaser = try connection.remoteObject($Upcasing.self)")
        let connection = try await process.makeConnection()
        let upcaser = try connection.remoteObject($Upcasing.self)
        for request in ["hello from the host", "sandboxed extensions"] {
            say("   try await upcaser.upcase(\"\(request)\") -> \"\(try await upcaser.upcase(request))\"")
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

        say("4. A new connection resumes it. Then the host asks for something 'hardened' forbids: a socket.")
        let second = try await process.makeConnection()
        let awake = try second.remoteObject($Upcasing.self)
        say("   upcase(\"awake again\") -> \"\(try await awake.upcase("awake again"))\"")
        do {
            try await awake.openSocket()
        } catch {
            say("   the pending call openSocket() failed once: \(error)")
        }
        try await Task.sleep(for: .milliseconds(200))
        let third = try await process.makeConnection()
        let fresh = try third.remoteObject($Upcasing.self)
        say("   a later connection launches a fresh process: upcase(\"fresh start\") -> \"\(try await fresh.upcase("fresh start"))\"")
        third.invalidate()
        process.invalidate()

        let updates = monitor.updates
        say("5. The external extension is not offered: it is unapproved. WAITING FOR APPROVAL (extsandbox approve org.extsandbox.demo.python-echo)")
        guard let approved = await wait(for: updates, seconds: 60, { $0.identities.contains { $0.point.name == AppExtensionPoint.echo.name } }) else {
            say("   no approval came")
            exit(1)
        }
        say("   the monitor reports at once: \(describe(approved))")
        let echo = approved.identities.first { $0.point.name == AppExtensionPoint.echo.name }!
        say("6. It launches \(echo.bundleIdentifier) (\(echo.displayName), in Python) in a 'standard' sandbox and talks to it.")
        let echoProcess = try await AppExtensionProcess(configuration: .init(identity: echo))
        let echoConnection = try await echoProcess.makeConnection()
        // The layer below typed calls: a byte message (what a proxy's calls ride on, as call envelopes).
        say("   It speaks no contract, so the host sends it bytes: the layer below typed calls.")
        say("   send(\"ping\") -> reply \"\(text(try await echoConnection.send(ExtensionMessage(Array("ping".utf8)))))\"")
        echoConnection.invalidate()
        echoProcess.invalidate()
        try await Task.sleep(for: .milliseconds(300))

        say("7. WAITING FOR REPLACEMENT: someone replaces the external extension's executable.")
        guard let replaced = await wait(for: updates, seconds: 60, { state in
            !state.identities.contains { $0.point.name == AppExtensionPoint.echo.name } && state.unapprovedCount == 1
        }) else {
            say("   no change came")
            exit(1)
        }
        say("   the monitor reports it unapproved again: \(describe(replaced))")
        do {
            _ = try await AppExtensionProcess(configuration: .init(identity: echo))
            say("   the old identity still launched (unexpected)")
            exit(1)
        } catch {
            say("   launching the identity the host still holds: \(error)")
        }
        monitor.cancel()
        say("Done.")
    }
}
