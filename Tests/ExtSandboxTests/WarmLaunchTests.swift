import ExtensionCatalog
import Foundation
import Glibc
import SandboxSystem
import Testing
import TestSupport
@testable import ExtSandbox
@testable import SandboxRuntime

/// The host's warm launches (``AppExtensionProcess/prepareWarmLaunches(of:count:)``): pre-built
/// sandboxes of a discovered extension's shape, taken by its launches, drained when it may no
/// longer launch or the host stops asking. Serialized: the host's supervisor and its pool are
/// one per process.
@Suite("Warm launches through the host API", .serialized)
struct WarmLaunchTests {
    /// The init pids of the host supervisor's ready pre-built sandboxes.
    static func readyPIDs() -> Set<pid_t> { Set(Supervisor.shared.pool.all.ready.map(\.started.pid)) }

    static func discoveredEcho(_ world: ExtensionWorld, identifier: String = "org.example.echo") async throws -> (AppExtensionPoint.Monitor, AppExtensionIdentity) {
        try world.install(identifier, executableSource: HostFixtures.productsDirectory + "/xsb-echo-extension")
        let name = identifier.split(separator: ".").last.map(String.init)! + ".appex"
        return try await HostFixtures.approveAndDiscover(world.external + "/" + name, identifier: identifier, in: world)
    }

    @Test("a discovered extension's launch takes a pre-built sandbox and answers")
    func warmLaunchAnswers() async throws {
        let world = try ExtensionWorld()
        let (monitor, identity) = try await Self.discoveredEcho(world)
        defer { monitor.cancel() }
        #expect(try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: 2) == 2)
        let prebuilt = Self.readyPIDs()
        #expect(prebuilt.count == 2)
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        #expect(prebuilt.contains(process.sandbox.pid), "the launch ran in a pre-built sandbox (\(process.sandbox.pid), \(prebuilt))")
        let connection = try await process.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("hello warm"))) == "hello warm")
        // The payload is the sealed copy of this launch, as in a cold launch.
        let payload = try #require(process.sandbox.processIdentifiers().dropFirst().first)
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(payload)/exe")) ?? ""
        #expect(exe.hasPrefix("/memfd:extsandbox-program"), "\(exe)")
        connection.invalidate()
        process.invalidate()
        #expect(await HostFixtures.exit(of: process.sandbox) != nil)
        // The pool refills behind the launch.
        #expect(await HostFixtures.eventually { Self.readyPIDs().count == 2 })
        await AppExtensionProcess.endWarmLaunches()
    }

    @Test("a revoked extension's pre-built sandboxes are gone once the monitor sees it, before any launch")
    func revokedIsDrainedByTheMonitor() async throws {
        let world = try ExtensionWorld()
        let (monitor, identity) = try await Self.discoveredEcho(world)
        defer { monitor.cancel() }
        try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: 2)
        let prebuilt = Self.readyPIDs()
        #expect(prebuilt.count == 2)
        #expect(try await world.cli(["revoke", "org.example.echo"]).status == 0)
        #expect(await HostFixtures.eventually { prebuilt.allSatisfy { HostFixtures.processState($0) == nil } })
        #expect(Self.readyPIDs().isEmpty)
        #expect(await !WarmLaunches.shared.keeps(identity))
        await AppExtensionProcess.endWarmLaunches()
    }

    /// Without a monitor watching (cancelled), the refused launch itself drains them: no
    /// sandbox built before the revocation is left for a later launch.
    @Test("a disabled extension's refused launch drains its pre-built sandboxes before it returns")
    func refusedLaunchDrains() async throws {
        let world = try ExtensionWorld()
        let (monitor, identity) = try await Self.discoveredEcho(world)
        monitor.cancel()
        try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: 2)
        let prebuilt = Self.readyPIDs()
        #expect(prebuilt.count == 2)
        #expect(try await world.cli(["disable", "org.example.echo"]).status == 0)
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            "\(error)".contains("the owner disabled it")
        }
        for pid in prebuilt { #expect(HostFixtures.processState(pid) == nil, "pre-built sandbox \(pid) is gone") }
        #expect(Self.readyPIDs().isEmpty)
        #expect(await !WarmLaunches.shared.keeps(identity))
        await AppExtensionProcess.endWarmLaunches()
    }

    @Test("an extension whose point has a container is never pre-built, and launches cold",
          arguments: [ContainerBudget(bytes: 16 << 20, inodes: 1024), nil])
    func containerPointIsCold(budget: ContainerBudget?) async throws {
        let world = try ExtensionWorld()
        let identifier = "org.example.echo"
        let bundle = try world.install(identifier, executableSource: HostFixtures.productsDirectory + "/xsb-echo-extension")
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      securityLevel: Fixtures.policyPath("standard", for: getuid() == 0 ? .root : .nobody),
                                      container: budget, sharedContainer: budget == nil ? "group" : nil)
        let approval = try ExtensionCatalog.currentApproval(of: try BundleValidator.validate(bundleAt: bundle).get())
        _ = try ApprovalStore(path: world.stateFile).update { $0.approvals[identifier] = approval }
        let monitor = try await AppExtensionPoint.Monitor(
            points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations))
        defer { monitor.cancel() }
        let identity = try #require(monitor.identities.first)
        #expect(try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: 2) == 0)
        #expect(Supervisor.shared.poolStatus == SandboxPoolStatus(ready: 0, building: 0, idleMemoryBytes: 0))
        #expect(await !WarmLaunches.shared.keeps(identity))
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        let connection = try await process.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("hello cold"))) == "hello cold")
        #expect(Supervisor.shared.poolStatus == SandboxPoolStatus(ready: 0, building: 0, idleMemoryBytes: 0))
        connection.invalidate()
        process.invalidate()
        #expect(await HostFixtures.exit(of: process.sandbox) != nil)
    }

    /// Monitors of another world (same host identifier and point, other locations and approvals)
    /// decide nothing about this world's extensions.
    @Test("another world's monitor, rescanning, leaves this world's pre-built sandboxes alone")
    func anotherWorldsMonitorDrainsNothing() async throws {
        let world = try ExtensionWorld(), other = try ExtensionWorld()
        let (monitor, identity) = try await Self.discoveredEcho(world)
        defer { monitor.cancel() }
        try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: 1)
        let prebuilt = Self.readyPIDs()
        #expect(prebuilt.count == 1)
        let (otherMonitor, _) = try await Self.discoveredEcho(other, identifier: "org.example.other")
        defer { otherMonitor.cancel() }
        // Its identities change (one more installed and approved): it rescans and drains what it no longer issues.
        let (thirdMonitor, _) = try await Self.discoveredEcho(other, identifier: "org.example.third")
        defer { thirdMonitor.cancel() }
        #expect(await HostFixtures.eventually { otherMonitor.identities.count == 2 })
        // What that rescan asks of the pool, asked here too, so that the outcome does not hang
        // on when the rescan's own drain runs.
        await WarmLaunches.shared.drain(
            notIn: otherMonitor.identities, points: [ExtensionWorld.openPoint],
            host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: other.locations))
        #expect(await WarmLaunches.shared.keeps(identity))
        for pid in prebuilt { #expect(HostFixtures.processState(pid) != nil, "pre-built sandbox \(pid) is still there") }
        await AppExtensionProcess.endWarmLaunches()
    }

    /// Before: a monitor took the identities weighed against its approvals file for its own when
    /// the files' names were equal as strings, so another world whose approvals file is another
    /// spelling ("e\u{301}" for "\u{E9}") drained this world's pre-built sandboxes.
    @Test("another world whose approvals file is another spelling of this one's leaves its pre-built sandboxes alone")
    func anotherSpellingOfTheApprovalsDrainsNothing() async throws {
        let world = try ExtensionWorld(), other = try ExtensionWorld()
        func discover(_ identifier: String, in world: ExtensionWorld, approvals: String) async throws -> (AppExtensionPoint.Monitor, AppExtensionIdentity) {
            let bundle = try world.install(identifier, executableSource: HostFixtures.productsDirectory + "/xsb-echo-extension")
            let approval = try ExtensionCatalog.currentApproval(of: try BundleValidator.validate(bundleAt: bundle).get())
            _ = try ApprovalStore(path: approvals).update { $0.approvals[identifier] = approval }
            var locations = world.locations
            locations.stateFile = approvals
            let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                          securityLevel: TestPaths.policiesDirectory + "/standard.yaml")
            let monitor = try await AppExtensionPoint.Monitor(
                points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: locations))
            guard let identity = monitor.identities.first(where: { $0.bundleIdentifier == identifier }) else {
                monitor.cancel()
                throw ExtensionWorld.CLIFailure(output: "\(identifier) was not discovered: \(monitor.state)")
            }
            return (monitor, identity)
        }
        let (monitor, identity) = try await discover("org.example.echo", in: world, approvals: world.root + "/state/\u{E9}")
        defer { monitor.cancel() }
        try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: 1)
        let prebuilt = Self.readyPIDs()
        #expect(prebuilt.count == 1)
        let spelledAlike = world.root + "/state/e\u{301}"
        let (otherMonitor, _) = try await discover("org.example.other", in: other, approvals: spelledAlike)
        defer { otherMonitor.cancel() }
        // Its identities change (one more installed and approved): it rescans and drains what it no longer issues.
        let (thirdMonitor, _) = try await discover("org.example.third", in: other, approvals: spelledAlike)
        defer { thirdMonitor.cancel() }
        #expect(await HostFixtures.eventually { otherMonitor.identities.count == 2 })
        // What that rescan asks of the pool, asked here too, so that the outcome does not hang
        // on when the rescan's own drain runs.
        var otherLocations = other.locations
        otherLocations.stateFile = spelledAlike
        await WarmLaunches.shared.drain(
            notIn: otherMonitor.identities, points: [ExtensionWorld.openPoint],
            host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: otherLocations))
        #expect(await WarmLaunches.shared.keeps(identity))
        for pid in prebuilt { #expect(HostFixtures.processState(pid) != nil, "pre-built sandbox \(pid) is still there") }
        await AppExtensionProcess.endWarmLaunches()
    }

    @Test("ending the host's warm launches leaves no process, fd or cgroup behind")
    func endLeavesNothing() async throws {
        let world = try ExtensionWorld()
        let (monitor, identity) = try await Self.discoveredEcho(world)
        defer { monitor.cancel() }
        try await AppExtensionProcess.prepareWarmLaunches(of: identity, count: 3)
        let ready = Supervisor.shared.pool.all.ready
        #expect(ready.count == 3)
        #expect(Supervisor.shared.poolStatus.idleMemoryBytes > 0)
        func target(_ fd: Int32) -> String? { SystemFiles.linkTarget("/proc/self/fd/\(fd)") }
        let sockets = ready.map { ($0.started.control_fd, target($0.started.control_fd)) }
        let directories = ready.flatMap { $0.cgroup?.directories ?? [] }
        await AppExtensionProcess.endWarmLaunches()
        #expect(Supervisor.shared.poolStatus == SandboxPoolStatus(ready: 0, building: 0, idleMemoryBytes: 0))
        for sandbox in ready { #expect(HostFixtures.processState(sandbox.started.pid) == nil, "pid \(sandbox.started.pid) is gone") }
        for (fd, was) in sockets { #expect(target(fd) != was, "fd \(fd) (\(was ?? "")) is closed") }
        for directory in directories { #expect(!FileManager.default.fileExists(atPath: directory), "\(directory) is removed") }
        #expect(await !WarmLaunches.shared.keeps(identity))
    }
}
