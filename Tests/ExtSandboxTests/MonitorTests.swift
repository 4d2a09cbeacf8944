import ExtensionCatalog
import ExtSandboxWire
import Foundation
import Glibc
import Testing
import TestSupport
@testable import ExtSandbox

/// `AppExtensionPoint.Monitor` on real directories with real inotify, changed by this process
/// and by the CLI in another process; launches through `AppExtensionProcess`.
@Suite("discovery monitor")
struct MonitorTests {
    static let products = TestPaths.productsDirectory
    static let echo = products + "/xsb-echo-extension"
    static let standard = TestPaths.policiesDirectory + "/standard.yaml"

    static let open = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none), securityLevel: standard)
    static let appOnly = AppExtensionPoint(name: ExtensionWorld.appOnlyPoint, scope: .init(restriction: .application), securityLevel: standard)

    func host(_ world: ExtensionWorld) -> AppExtensionHost {
        AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
    }

    /// Waits (inotify does the work; this only looks) until the monitor's state satisfies `condition`.
    func eventually(_ monitor: AppExtensionPoint.Monitor, within seconds: Double = 15,
                    _ condition: (AppExtensionPoint.Monitor.State) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(monitor.state) { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition(monitor.state)
    }

    func identifiers(_ monitor: AppExtensionPoint.Monitor) -> [String] { monitor.identities.map(\.bundleIdentifier) }

    @Test func installApproveReplaceDisableRemoveFromAnotherProcess() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        #expect(identifiers(monitor) == ["org.example.bundled"])
        let identity = try #require(monitor.identities.first)
        #expect(identity.displayName == "org.example.bundled display")
        #expect(identity.version == "1.0")
        #expect(identity.point.name == ExtensionWorld.openPoint)
        #expect(identity.hostIdentifier == ExtensionWorld.hostIdentifier)
        #expect(!identity.isDevelopmentOnly)

        var updates = monitor.updates.makeAsyncIterator()
        #expect(await updates.next()?.identities.count == 1)  // the current state comes first

        // Installed the way installers do: built under another name, renamed into place.
        let external = try world.install("org.example.outside", viaRename: true)
        let installed = await updates.next()
        #expect(installed?.unapprovedCount == 1)
        #expect(installed?.identities.count == 1)

        #expect(try await world.cli(["approve", "org.example.outside"]).status == 0)
        #expect(await eventually(monitor) { $0.identities.map(\.bundleIdentifier) == ["org.example.bundled", "org.example.outside"] })

        try world.replaceExecutable(of: external)
        #expect(await eventually(monitor) { $0.unapprovedCount == 1 && $0.identities.count == 1 })

        #expect(try await world.cli(["approve", "org.example.outside"]).status == 0)
        #expect(await eventually(monitor) { $0.identities.count == 2 })
        #expect(try await world.cli(["disable", "org.example.bundled"]).status == 0)
        #expect(await eventually(monitor) { $0.disabledCount == 1 && $0.identities.map(\.bundleIdentifier) == ["org.example.outside"] })
        #expect(try await world.cli(["enable", "org.example.bundled"]).status == 0)
        #expect(try await world.cli(["revoke", "org.example.outside"]).status == 0)
        #expect(await eventually(monitor) { $0.disabledCount == 0 && $0.unapprovedCount == 1 && $0.identities.count == 1 })

        try FileManager.default.removeItem(atPath: external)
        #expect(await eventually(monitor) { $0.unapprovedCount == 0 && $0.identities.count == 1 })
        // A manifest made unsafe is reported invalid at once.
        let bundled = world.hostBundle + "/Extensions/bundled.appex"
        chmod(bundled + "/extension.yaml", 0o666)
        #expect(await eventually(monitor) { $0.identities.isEmpty && $0.invalid.first?.reason.contains("writable by everyone") == true })
    }

    @Test func severalMonitorsAndPointsAddedAndRemoved() async throws {
        let world = try ExtensionWorld()
        let first = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        let second = try await AppExtensionPoint.Monitor(points: [Self.open, Self.appOnly], host: host(world))
        try world.install("org.example.a", in: world.hostBundle + "/Extensions")
        try world.install("org.example.b", point: ExtensionWorld.appOnlyPoint, in: world.hostBundle + "/Extensions")
        #expect(await eventually(first) { $0.identities.map(\.bundleIdentifier) == ["org.example.a"] })
        #expect(await eventually(second) { $0.identities.map(\.bundleIdentifier) == ["org.example.a", "org.example.b"] })
        await first.addPoint(Self.appOnly)
        #expect(identifiers(first) == ["org.example.a", "org.example.b"])
        await second.removePoint(named: Self.open.name)
        #expect(identifiers(second) == ["org.example.b"])
        first.cancel()
        try world.install("org.example.c", in: world.hostBundle + "/Extensions")
        #expect(await eventually(second) { _ in true })
        #expect(identifiers(first) == ["org.example.a", "org.example.b"])  // cancelled: no longer follows
    }

    /// Before: a monitor of the open point listed the host's bundled extension of its app-only
    /// point as invalid ("the host does not define it"), though the host's declaration does.
    @Test func aBundledExtensionOfAnotherOfTheHostsPointsIsAnotherMonitors() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.a", in: world.hostBundle + "/Extensions")
        try world.install("org.example.b", point: ExtensionWorld.appOnlyPoint, in: world.hostBundle + "/Extensions")
        let open = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        let appOnly = try await AppExtensionPoint.Monitor(points: [Self.appOnly], host: host(world))
        var expected = AppExtensionPoint.Monitor.State()
        expected.identities = open.identities
        #expect(open.state == expected, "\(open.state)")
        #expect(identifiers(open) == ["org.example.a"])
        #expect(appOnly.state.invalid.isEmpty && identifiers(appOnly) == ["org.example.b"], "\(appOnly.state)")
        // A point the host defines nowhere is invalid, for every monitor of the host.
        try world.install("org.example.c", point: "org.example.host.nowhere", in: world.hostBundle + "/Extensions")
        for monitor in [open, appOnly] {
            #expect(await eventually(monitor) { state in
                state.invalid.map(\.reason) == ["unknown point org.example.host.nowhere: the host does not define it"]
            }, "\(monitor.state)")
        }
        // Without the declaration file the host's points are what the monitor follows.
        try FileManager.default.removeItem(atPath: world.points + "/host.appext")
        let alone = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        #expect(alone.state.invalid.count == 2, "\(alone.state)")
    }

    /// A bundle filled in steps: the executable lands in a subdirectory after the monitor has
    /// seen the bundle (invalid, no executable yet). Failed before subdirectories were watched.
    @Test func anExecutableLandingInANewSubdirectoryIsSeen() async throws {
        let world = try ExtensionWorld()
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        let bundle = world.hostBundle + "/Extensions/steps.appex"
        try FileManager.default.createDirectory(atPath: bundle + "/bin", withIntermediateDirectories: true)
        try world.write(bundle + "/extension.yaml", "schema: 1\nidentifier: org.example.steps\nname: Steps\nversion: \"1\"\npoint: \(ExtensionWorld.openPoint)\nexecutable: bin/run\n")
        #expect(await eventually(monitor) { $0.invalid.first?.reason.contains("bin/run") == true })
        try world.write(bundle + "/bin/run", "#!/bin/sh\n", mode: 0o755)
        #expect(await eventually(monitor) { $0.identities.map(\.bundleIdentifier) == ["org.example.steps"] })
    }

    @Test func aBundleInstalledWhileTheMonitorStartsIsSeen() async throws {
        for round in 0..<3 {
            let world = try ExtensionWorld()
            for i in 0..<30 { try world.install("org.example.pre\(i)", in: world.hostBundle + "/Extensions") }
            let installer = Task.detached { try world.install("org.example.late\(round)", in: world.hostBundle + "/Extensions", viaRename: true) }
            let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
            _ = try await installer.value
            #expect(await eventually(monitor) { $0.identities.count == 31 }, "round \(round): \(monitor.identities.count)")
        }
    }

    @Test func scopeApplicationNeverSeesOrLaunchesExternalExtensions() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.private", point: ExtensionWorld.appOnlyPoint, executableSource: Self.echo)
        // Approval does not matter: the point accepts only the host's own extensions.
        var state = ApprovalState()
        let bundle = try BundleValidator.validate(bundleAt: world.external + "/private.appex").get()
        state.approvals["org.example.private"] = try ExtensionCatalog.currentApproval(of: bundle)
        try ApprovalStore(path: world.stateFile).update { $0 = state }
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.appOnly], host: host(world))
        #expect(monitor.state == AppExtensionPoint.Monitor.State())

        // Even an identity discovered for an open point cannot launch under the app-only one:
        // it is not the identity the monitor issued.
        let open = try await AppExtensionPoint.Monitor(points: [Self.open.with(name: ExtensionWorld.appOnlyPoint)], host: host(world))
        let discovered = try #require(open.identities.first)
        let smuggled = AppExtensionIdentity(
            bundleIdentifier: discovered.bundleIdentifier, displayName: discovered.displayName, version: discovered.version,
            point: Self.appOnly, hostIdentifier: discovered.hostIdentifier, executablePath: discovered.executablePath,
            arguments: [], origin: discovered.origin)
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: smuggled))
        } throws: { error in
            guard case ExtensionError.discovery(.notDiscovered(let identifier)) = error else { return false }
            return identifier == "org.example.private"
        }
    }

    @Test func discoveredExtensionsLaunchOnlyWhileApprovedAndUnchanged() async throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.echo", executableSource: Self.echo)
        #expect(try await world.cli(["approve", "org.example.echo"]).status == 0)
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        let identity = try #require(monitor.identities.first)
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        let connection = try await process.makeConnection()
        let reply = try await connection.send(ExtensionMessage(Array("hello".utf8)))
        #expect(String(decoding: reply.payload, as: UTF8.self) == "hello")
        connection.invalidate()
        process.invalidate()
        #expect(await eventually(monitor) { _ in process.sandbox.isRunning == false })

        // Revoked in another process: the identity the host still holds no longer launches.
        #expect(try await world.cli(["revoke", "org.example.echo"]).status == 0)
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            "\(error)" == "refusing to launch org.example.echo: it is not approved: not approved yet"
        }
        // Approved again, then its executable replaced: refused again.
        #expect(try await world.cli(["approve", "org.example.echo"]).status == 0)
        try FileManager.default.removeItem(atPath: path + "/bin/run")
        try Fixtures.writeFile(path + "/bin/run", Array(try #require(FileManager.default.contents(atPath: "/bin/true"))), mode: 0o755)
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            "\(error)".contains("refusing to launch org.example.echo")
        }
    }

    /// Before: refused with the validator's "cannot stat: No such file or directory".
    @Test func aBundleRemovedAfterDiscoveryIsNoLongerInstalled() async throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.echo", in: world.hostBundle + "/Extensions", executableSource: Self.echo)
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        let identity = try #require(monitor.identities.first)
        try FileManager.default.removeItem(atPath: path)
        let gone = "refusing to launch org.example.echo: it is no longer installed (\(path) is gone)"
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            "\(error)" == gone
        }
        // The launch's own recheck (a bundle removed after the handle was made) says the same.
        #expect {
            _ = try LaunchAuthorization.authorize(identity)
        } throws: { error in
            "\(error)" == gone
        }
        #expect(await eventually(monitor) { $0 == AppExtensionPoint.Monitor.State() }, "\(monitor.state)")
    }

    @Test func aForgedIdentityIsRefused() async throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.forged", executableSource: Self.echo)
        let bundle = try BundleValidator.validate(bundleAt: path).get()
        // Everything a monitor would have put in it, but no monitor issued it.
        let forged = AppExtensionIdentity(
            bundleIdentifier: "org.example.forged", displayName: "Echo", version: "1.0", point: Self.open,
            hostIdentifier: ExtensionWorld.hostIdentifier, executablePath: bundle.executablePath, arguments: [],
            origin: .discovered(DiscoveredExtension(bundle: bundle, origin: .bundled, stateFile: world.stateFile, systemStateFile: world.systemStateFile,
                                                  containerDirectory: world.containers)))
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: forged))
        } throws: { error in
            "\(error)" == "refusing to launch org.example.forged: its identity was not produced by discovery (AppExtensionPoint.Monitor)"
        }
    }

    /// What the extension said is quoted with its control characters escaped: hosts log and show
    /// the error, and a terminal must not act on it.
    @Test(arguments: [
        (#"org.example.me"#, "org.example.me"),
        (#"org.example.\x1b[2K\rme\n"#, #"org.example.\e[2K\rme\n"#),
    ])
    func aReadyWithAnotherIdentifierFailsTheLaunchNamingBoth(said: String, quoted: String) async throws {
        let script = """
            import socket, struct, time
            said = b"\(said)"
            s = socket.socket(fileno=3)
            s.sendall(struct.pack(">IBBHIQ", 16 + len(said), 9, 0, 0, 0, 0) + said)
            time.sleep(30)
            """
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "org.example.expected", executablePath: "/usr/bin/python3", point: Self.open, arguments: ["-c", script])
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            "\(error)" == "the extension launched as org.example.expected said READY as \(quoted): identifiers must match"
        }
    }

    @Test func aCorruptApprovalsFileFailsTheMonitorAndLaterLaunchesNothing() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        try world.write(world.stateFile, "not an approvals file\n")
        await #expect {
            _ = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        } throws: { error in
            "\(error)".hasPrefix(world.stateFile + ":1: expected 'extsandbox-approvals 1'")
        }
        try FileManager.default.removeItem(atPath: world.stateFile)
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        #expect(monitor.identities.count == 1)
        try world.write(world.stateFile + ".new", "extsandbox-approvals 1\nrubbish\n")
        rename(world.stateFile + ".new", world.stateFile)
        #expect(await eventually(monitor) { $0.approvalsProblem?.line == 2 && $0.identities.isEmpty })
    }

    @Test("a monitor nobody holds ends: its watcher's handler does not keep it alive, and its updates finish")
    func releasedMonitorEnds() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        var monitor: AppExtensionPoint.Monitor? = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        let updates = try #require(monitor).updates
        weak let released = monitor
        monitor = nil
        try #require(released == nil, "the watcher keeps its monitor alive")
        var states = 0
        for await _ in updates { states += 1 }  // the state at the start, then the end
        #expect(states == 1)
        // A change after the end reaches nobody (and crashes nothing).
        try world.install("org.example.later", in: world.hostBundle + "/Extensions")
    }
}

extension AppExtensionPoint {
    func with(name: String) -> AppExtensionPoint {
        var copy = self
        copy.name = name
        return copy
    }
}
