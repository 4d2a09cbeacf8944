import CSeccomp
import ExtSandbox
import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// An extension's private container and its host's shared container, against real sandboxed
/// extensions (docs/containers.md).
@Suite("Extension containers")
struct ContainerTests {
    static let budget = ContainerBudget(bytes: 16 << 20, inodes: 1024)
    static let group = "org.example.host.group"

    /// Each request: `count` in the container read and incremented (its old value answered),
    /// the shared container's `hello` read, and whatever `extra()` says.
    static func prelude(extra: String = "return ''") -> String {
        """
        def extra():
            \(extra)
        def probe():
            out = []
            c = os.environ.get("EXTSANDBOX_CONTAINER")
            if c:
                p = c + "/count"
                n = int(open(p).read()) if os.path.exists(p) else 0
                with open(p, "w") as f:
                    f.write(str(n + 1))
                    f.flush()
                    os.fsync(f.fileno())
                out.append("count:%d" % n)
            else:
                out.append("count:none")
            s = os.environ.get("EXTSANDBOX_SHARED_CONTAINER")
            if s:
                try:
                    out.append("shared:" + open(s + "/hello").read().strip())
                except OSError as e:
                    out.append("shared:" + type(e).__name__)
            else:
                out.append("shared:none")
            x = extra()
            if x:
                out.append(x)
            return " ".join(out).encode()
        """
    }

    /// What a neighbour tries to reach the container `target` (a host path) through.
    static func isolationProbe(target: String) -> String {
        """
        seen = []
        for p in ["\(target)/count", "/container/../\((target as NSString).lastPathComponent)/count", "/proc/1/root\(target)/count",
                  "/proc/self/root\(target)/count"]:
            try:
                open(p).read()
                seen.append(p)
            except OSError:
                pass
            try:
                os.symlink("\(target)", "/container/l")
            except OSError:
                pass
            try:
                open("/container/l/count").read()
                seen.append("link")
            except OSError:
                pass
        return "reach:" + (",".join(seen) or "nothing")
        """.replacingOccurrences(of: "\n", with: "\n    ")
    }

    static func point(_ name: String = ExtensionWorld.openPoint, shared: String? = group) -> AppExtensionPoint {
        AppExtensionPoint(name: name, scope: .init(restriction: .none),
                          securityLevel: Fixtures.policyPath("standard", for: getuid() == 0 ? .root : .nobody),
                          container: budget, sharedContainer: shared)
    }

    static func discover(_ identifier: String, bundle: String, in world: ExtensionWorld, point: AppExtensionPoint,
                         host: String = ExtensionWorld.hostIdentifier) async throws -> (AppExtensionPoint.Monitor, AppExtensionIdentity) {
        let approval = try ExtensionCatalog.currentApproval(of: try BundleValidator.validate(bundleAt: bundle).get())
        _ = try ApprovalStore(path: world.stateFile).update { $0.approvals[identifier] = approval }
        let monitor = try await AppExtensionPoint.Monitor(points: [point], host: AppExtensionHost(identifier: host, locations: world.locations))
        guard let identity = monitor.identities.first(where: { $0.bundleIdentifier == identifier }) else {
            monitor.cancel()
            throw ExtensionWorld.CLIFailure(output: "\(identifier) was not discovered: \(monitor.state)")
        }
        return (monitor, identity)
    }

    static func ask(_ identity: AppExtensionIdentity) async throws -> String {
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        return HostFixtures.text(try await connection.send(HostFixtures.message("probe")))
    }

    /// Runs `body` as uid/gid 65534 in a child process: an unprivileged host, end to end.
    static func asUnprivilegedHost(_ body: () async throws -> Void) async -> Never {
        _ = Fixtures.policyPath("standard", for: .nobody)  // written while still root
        guard setgroups(0, nil) == 0, setgid(65534) == 0, setuid(65534) == 0 else {
            FileHandle.standardError.write(Data("cannot become nobody\n".utf8))
            exit(90)
        }
        // A change of uid makes a process non-dumpable, its /proc files root's: the supervisor
        // could not write its sandboxes' id maps.
        _ = xsb_raw_syscall6(Int(SYS_prctl), 4 /* PR_SET_DUMPABLE */, 1, 0, 0, 0, 0)
        do {
            try await body()
            exit(0)
        } catch {
            report("\(error)")
            exit(91)
        }
    }

    /// Where the child says what went wrong (its standard error is not kept when the
    /// expectation fails).
    static let log = "/tmp/xsb-container-tests.log"

    static func report(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
        try? (text + "\n").write(toFile: log, atomically: false, encoding: .utf8)
    }

    static func check(_ condition: Bool, _ what: @autoclosure () -> String) {
        guard !condition else { return }
        report("FAILED: \(what())")
        exit(92)
    }

    @Test("an unprivileged host: data persists across launches, a crash, a suspension and an update; neighbours and other hosts are kept out", .oneExitTestAtATime)
    func unprivilegedEndToEnd() async throws {
        unlink(Self.log)
        await #expect(processExitsWith: .success) {
            await ContainerTests.asUnprivilegedHost {
                let world = try ExtensionWorld()
                let a = "org.example.keeper", b = "org.example.neighbour", c = "org.example.sibling", d = "org.example.stranger"
                let keeper = try world.install(a, script: "")
                try world.write(keeper + "/bin/run", HostFixtures.pythonExtension(reply: "probe()", prelude: ContainerTests.prelude()), mode: 0o755)
                let target = world.containers + "/" + a
                try world.write(world.points + "/other.appext", PointDeclarationFile(hostIdentifier: ExtensionWorld.hostIdentifier, points: [
                    ExtensionPointDeclaration(name: "org.example.host.other", restriction: .none)]).rendered())
                let neighbour = try world.install(b, point: "org.example.host.other", script: "")
                try world.write(neighbour + "/bin/run", HostFixtures.pythonExtension(
                    reply: "probe()", prelude: ContainerTests.prelude(extra: ContainerTests.isolationProbe(target: target))), mode: 0o755)
                let sibling = try world.install(c, script: "")
                try world.write(sibling + "/bin/run", HostFixtures.pythonExtension(reply: "probe()", prelude: ContainerTests.prelude()), mode: 0o755)
                let stranger = try world.install(d, script: "")
                try world.write(stranger + "/bin/run", HostFixtures.pythonExtension(reply: "probe()", prelude: ContainerTests.prelude()), mode: 0o755)

                // The host writes into its shared container; its extensions read it.
                let host = AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
                let shared = try host.sharedContainer(named: ContainerTests.group)
                try "from the host\n".write(toFile: shared + "/hello", atomically: false, encoding: .utf8)

                var (monitor, identity) = try await ContainerTests.discover(a, bundle: keeper, in: world, point: ContainerTests.point())
                ContainerTests.check(try await ContainerTests.ask(identity) == "count:0 shared:from the host", "first launch")
                ContainerTests.check(try await ContainerTests.ask(identity) == "count:1 shared:from the host", "second launch")

                // A crash (SIGKILL of the sandbox) and the relaunch; then a suspension.
                let process = try await AppExtensionProcess(configuration: .init(identity: identity, suspendAfter: .milliseconds(50)))
                guard case .notEnforced = process.containerBound else {
                    ContainerTests.check(false, "an unprivileged caller's bound is reported as not enforced: \(process.containerBound)")
                    return
                }
                var connection = try await process.makeConnection()
                ContainerTests.check(HostFixtures.text(try await connection.send(HostFixtures.message("x"))).hasPrefix("count:2"), "before the crash")
                connection.invalidate()
                process.sandbox.kill()
                _ = await process.sandbox.waitForExit()
                connection = try await process.makeConnection()
                ContainerTests.check(HostFixtures.text(try await connection.send(HostFixtures.message("x"))).hasPrefix("count:3"), "after the crash")
                connection.invalidate()
                try await Task.sleep(for: .milliseconds(300))
                connection = try await process.makeConnection()
                ContainerTests.check(HostFixtures.text(try await connection.send(HostFixtures.message("x"))).hasPrefix("count:4"), "after a suspension")
                connection.invalidate()
                process.invalidate()
                _ = await HostFixtures.exit(of: process.sandbox)
                monitor.cancel()

                // An update of the executable (same identifier), approved again.
                try world.write(keeper + "/bin/.run.new", HostFixtures.pythonExtension(reply: "probe()", prelude: ContainerTests.prelude(extra: "return 'v2'")), mode: 0o755)
                rename(keeper + "/bin/.run.new", keeper + "/bin/run")
                (monitor, identity) = try await ContainerTests.discover(a, bundle: keeper, in: world, point: ContainerTests.point())
                let updated = try await ContainerTests.ask(identity)
                ContainerTests.check(updated == "count:5 shared:from the host v2", "after the update: \(updated)")
                monitor.cancel()

                // A neighbour of another point without the shared container: its own container,
                // nothing of the keeper's by path, `..`, /proc or a link.
                let (m2, neighbourIdentity) = try await ContainerTests.discover(
                    b, bundle: neighbour, in: world, point: ContainerTests.point("org.example.host.other", shared: nil))
                let seen = try await ContainerTests.ask(neighbourIdentity)
                ContainerTests.check(seen == "count:0 shared:none reach:nothing", "the neighbour: \(seen)")
                m2.cancel()

                // A sibling of the same point shares the host's container, and writes to it.
                let (m3, siblingIdentity) = try await ContainerTests.discover(c, bundle: sibling, in: world, point: ContainerTests.point())
                let siblingSays = try await ContainerTests.ask(siblingIdentity)
                ContainerTests.check(siblingSays == "count:0 shared:from the host", "the sibling: \(siblingSays)")
                m3.cancel()

                // Another host's extension of a point with the same shared name sees its own host's.
                let (m4, strangerIdentity) = try await ContainerTests.discover(d, bundle: stranger, in: world, point: ContainerTests.point(), host: "org.example.otherhost")
                let strangerSays = try await ContainerTests.ask(strangerIdentity)
                ContainerTests.check(strangerSays == "count:0 shared:FileNotFoundError", "the stranger: \(strangerSays)")
                m4.cancel()
            }
        }
        if let said = try? String(contentsOfFile: Self.log, encoding: .utf8) { Issue.record("the host said: \(said)") }
    }
}
