import CSeccomp
import ExtSandbox
import ExtensionCatalog
import Foundation
import Glibc
import SandboxRuntime
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

    /// Installs `identifier` in `world` as a Python extension answering ``probe()`` (with
    /// `extra` in it) and returns its bundle.
    static func installProbe(_ identifier: String, in world: ExtensionWorld, point: String = ExtensionWorld.openPoint,
                             extra: String = "return ''") throws -> String {
        let bundle = try world.install(identifier, point: point, script: "")
        try world.write(bundle + "/bin/run", HostFixtures.pythonExtension(reply: "probe()", prelude: prelude(extra: extra)), mode: 0o755)
        return bundle
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
                let keeper = try ContainerTests.installProbe(a, in: world)
                let target = world.containers + "/" + a
                try world.write(world.points + "/other.appext", PointDeclarationFile(hostIdentifier: ExtensionWorld.hostIdentifier, points: [
                    ExtensionPointDeclaration(name: "org.example.host.other", restriction: .none)]).rendered())
                let neighbour = try ContainerTests.installProbe(b, in: world, point: "org.example.host.other", extra: ContainerTests.isolationProbe(target: target))
                let sibling = try ContainerTests.installProbe(c, in: world)
                let stranger = try ContainerTests.installProbe(d, in: world)

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
                // While it runs, reset refuses.
                do {
                    try world.locations.containers.reset(a)
                    ContainerTests.check(false, "reset emptied a running extension's container")
                } catch {
                    ContainerTests.check("\(error)".contains("running"), "reset refused: \(error)")
                }
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

/// A root caller's container is an ext4 image: the kernel enforces its budget, and no mount or
/// loop device outlives its use.
@Suite("Bounded containers (root)")
struct BoundedContainerTests {
    /// Loop devices whose backing file is `image`.
    static func loops(backing image: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/sys/block")) ?? []).filter { name in
            name.hasPrefix("loop") && (try? String(contentsOfFile: "/sys/block/\(name)/loop/backing_file", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == image
        }
    }

    static func mounted(_ path: String) -> Bool {
        ((try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? "").split(separator: "\n")
            .contains { $0.split(separator: " ").dropFirst(4).first.map(String.init) == path }
    }

    /// What a file takes on the host's disk (its allocated blocks). The disk's free space is
    /// no measure: other processes write to it meanwhile.
    static func allocatedBytes(_ path: String) -> UInt64 {
        var info = stat()
        guard stat(path, &info) == 0 else { return .max }
        return UInt64(info.st_blocks) * 512
    }

    @Test("writes stop at the byte and inode budget with ENOSPC; the host's disk keeps its space; nothing stays mounted")
    func budgetEnforced() async throws {
        try #require(getuid() == 0)
        let world = try ExtensionWorld()
        let containers = world.locations.containers
        let budget = ContainerBudget(bytes: 8 << 20, inodes: 256)
        let path = try containers.prepare("org.example.filler", uid: 65534, gid: 65534)
        let image = try containers.prepareImage("org.example.filler", bytes: budget.bytes, inodes: budget.inodes, uid: 65534, gid: 65534)
        #expect(containers.usage("org.example.filler")!.bytes < budget.bytes)
        let placement = try ContainerVolumes.shared.place(image: image, at: path)
        #expect(Self.mounted(path))
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_uid == 65534 && info.st_mode & 0o7777 == 0o700)
        // Bytes: one file grows until the file system is full.
        let fd = open(path + "/big", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
        let chunk = [UInt8](repeating: 0x5a, count: 1 << 16)
        var written = 0, failure: Int32 = 0
        while written < 64 << 20 {
            let n = write(fd, chunk, chunk.count)
            if n < 0 { failure = errno; break }
            written += n
        }
        close(fd)
        #expect(failure == ENOSPC)
        #expect(written <= Int(budget.bytes))
        unlink(path + "/big")
        // Inodes: empty files until there are none left.
        var files = 0
        while files < 100_000 {
            let f = open(path + "/f\(files)", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            if f < 0 { failure = errno; break }
            close(f)
            files += 1
        }
        #expect(failure == ENOSPC)
        #expect(files < 1024)
        // The host's disk paid at most the image's size.
        #expect(Self.allocatedBytes(image) <= budget.bytes)
        placement.remove()
        #expect(!Self.mounted(path))
        #expect(ContainerVolumes.shared.isMounted(image))
        placement.release()
        #expect(!ContainerVolumes.shared.isMounted(image))
        #expect(await HostFixtures.eventually { Self.loops(backing: image).isEmpty }, "\(Self.loops(backing: image))")
        // The data persists: the next mount sees what the last one left.
        let again = try ContainerVolumes.shared.place(image: image, at: path)
        #expect(access(path + "/f0", F_OK) == 0)
        again.release()
        #expect(try containers.reset("org.example.filler"))
        #expect(access(image, F_OK) != 0)
    }

    @Test("a placement a SIGKILLed host left is detached by the next one, and its loop device goes with it", .oneExitTestAtATime)
    func leftOverPlacement() async throws {
        try #require(getuid() == 0)
        let directory = "/tmp/xsb-container-sigkill"
        _ = try? FileManager.default.removeItem(atPath: directory)
        let containers = ExtensionContainers(directory: directory)
        let path = try containers.prepare("org.example.killed", uid: 65534, gid: 65534)
        let image = try containers.prepareImage("org.example.killed", bytes: 4 << 20, inodes: 64, uid: 65534, gid: 65534)
        await #expect(processExitsWith: .signal(SIGKILL)) {
            let containers = ExtensionContainers(directory: "/tmp/xsb-container-sigkill")
            let placement = try? ContainerVolumes.shared.place(image: containers.imagePath(of: "org.example.killed"),
                                                                at: containers.path(of: "org.example.killed"))
            _ = placement
            kill(getpid(), SIGKILL)
        }
        // The child was in this test's mount namespace: its placement is still here, nothing else.
        #expect(Self.mounted(path))
        let placement = try ContainerVolumes.shared.place(image: image, at: path)
        placement.release()
        #expect(!Self.mounted(path))
        #expect(await HostFixtures.eventually { Self.loops(backing: image).isEmpty }, "\(Self.loops(backing: image))")
        try FileManager.default.removeItem(atPath: directory)
    }

    @Test("a root host's extension gets the bounded container or no launch at all")
    func rootLaunch() async throws {
        try #require(getuid() == 0)
        let world = try ExtensionWorld()
        let bundle = try ContainerTests.installProbe("org.example.rootkeeper", in: world)
        let (monitor, identity) = try await ContainerTests.discover("org.example.rootkeeper", bundle: bundle, in: world, point: ContainerTests.point(shared: nil))
        defer { monitor.cancel() }
        let image = world.locations.containers.imagePath(of: "org.example.rootkeeper")
        #expect(try await ContainerTests.ask(identity) == "count:0 shared:none")
        #expect(try await ContainerTests.ask(identity) == "count:1 shared:none")
        // A crash (SIGKILL of the sandbox) and the relaunch; then a suspension.
        let process = try await AppExtensionProcess(configuration: .init(identity: identity, suspendAfter: .milliseconds(50)))
        #expect(process.containerBound == .enforced(ContainerTests.budget))
        var connection = try await process.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("x"))) == "count:2 shared:none")
        connection.invalidate()
        process.sandbox.kill()
        _ = await process.sandbox.waitForExit()
        connection = try await process.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("x"))) == "count:3 shared:none")
        connection.invalidate()
        try await Task.sleep(for: .milliseconds(300))
        connection = try await process.makeConnection()
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("x"))) == "count:4 shared:none")
        connection.invalidate()
        process.invalidate()
        _ = await HostFixtures.exit(of: process.sandbox)
        #expect(await HostFixtures.eventually { !ContainerVolumes.shared.isMounted(image) })
        #expect(!Self.mounted(world.locations.containers.path(of: "org.example.rootkeeper")))
        #expect(await HostFixtures.eventually { Self.loops(backing: image).isEmpty })
    }

    static let filler = """
        import errno
        out = []
        try:
            with open("/container/big", "wb") as f:
                while True:
                    f.write(b"z" * 65536)
                    f.flush()
        except OSError as e:
            out.append("bytes:" + errno.errorcode.get(e.errno, str(e.errno)))
        os.unlink("/container/big")
        try:
            for i in range(1000000):
                open("/container/f%d" % i, "w").close()
        except OSError as e:
            out.append("inodes:" + errno.errorcode.get(e.errno, str(e.errno)))
        return " ".join(out)
        """.replacingOccurrences(of: "\n", with: "\n    ")

    @Test("a root host: an extension filling its container stops at the limit; the host, its shared container and another extension keep working")
    func rootFillAndNeighbours() async throws {
        try #require(getuid() == 0)
        let world = try ExtensionWorld()
        let fillerBundle = try ContainerTests.installProbe("org.example.filler", in: world, extra: Self.filler)
        let target = world.locations.containers.path(of: "org.example.filler")
        let keeperBundle = try ContainerTests.installProbe("org.example.keeper", in: world, extra: ContainerTests.isolationProbe(target: target))
        let host = AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
        let shared = try host.sharedContainer(named: ContainerTests.group)
        try "from the host\n".write(toFile: shared + "/hello", atomically: false, encoding: .utf8)
        var info = stat()
        #expect(stat(shared, &info) == 0 && info.st_uid == 65534 && info.st_mode & 0o777 == 0o700)

        let (m1, filler) = try await ContainerTests.discover("org.example.filler", bundle: fillerBundle, in: world, point: ContainerTests.point())
        defer { m1.cancel() }
        let filled = try await ContainerTests.ask(filler)
        #expect(filled == "count:0 shared:from the host bytes:ENOSPC inodes:ENOSPC", "\(filled)")
        let image = world.locations.containers.imagePath(of: "org.example.filler")
        #expect(Self.allocatedBytes(image) <= ContainerTests.budget.bytes)
        #expect(Self.allocatedBytes(image) >= ContainerTests.budget.bytes / 2)  // it did fill it
        let (m2, keeper) = try await ContainerTests.discover("org.example.keeper", bundle: keeperBundle, in: world, point: ContainerTests.point())
        defer { m2.cancel() }
        let kept = try await ContainerTests.ask(keeper)
        #expect(kept == "count:0 shared:from the host reach:nothing", "\(kept)")
        // The shared container is the host's too: what an extension writes there, it reads.
        #expect(FileManager.default.fileExists(atPath: shared + "/hello"))
        #expect(await HostFixtures.eventually { !ContainerVolumes.shared.isMounted(image) && Self.loops(backing: image).isEmpty })
        #expect(!Self.mounted(target))
    }

    @Test("a SIGKILLed root host leaves no mount and no loop device of its extension's container", .oneExitTestAtATime)
    func hostKilled() async throws {
        try #require(getuid() == 0)
        let directory = "/tmp/xsb-container-hostkill"
        _ = try? FileManager.default.removeItem(atPath: directory)
        await #expect(processExitsWith: .signal(SIGKILL)) {
            let world = try! ExtensionWorld()
            let bundle = try! ContainerTests.installProbe("org.example.hostkill", in: world)
            var locations = world.locations
            locations.containerDirectory = "/tmp/xsb-container-hostkill"
            let approval = try! ExtensionCatalog.currentApproval(of: try! BundleValidator.validate(bundleAt: bundle).get())
            _ = try! ApprovalStore(path: world.stateFile).update { $0.approvals["org.example.hostkill"] = approval }
            let monitor = try! await AppExtensionPoint.Monitor(
                points: [ContainerTests.point(shared: nil)], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: locations))
            let identity = monitor.identities.first!
            let process = try! await AppExtensionProcess(configuration: .init(identity: identity))
            let connection = try! await process.makeConnection()
            _ = try? await connection.send(HostFixtures.message("x"))
            kill(getpid(), SIGKILL)
        }
        let image = directory + "/.images/org.example.hostkill.ext4"
        #expect(FileManager.default.fileExists(atPath: image))
        #expect(await HostFixtures.eventually { Self.loops(backing: image).isEmpty }, "\(Self.loops(backing: image))")
        #expect(!Self.mounted(directory + "/org.example.hostkill"))
        // The data reached the container: the next mount reads it.
        let containers = ExtensionContainers(directory: directory)
        let placement = try ContainerVolumes.shared.place(image: image, at: containers.path(of: "org.example.hostkill"))
        #expect((try? String(contentsOfFile: directory + "/org.example.hostkill/count", encoding: .utf8)) == "1")
        placement.release()
        #expect(await HostFixtures.eventually { Self.loops(backing: image).isEmpty })
        try FileManager.default.removeItem(atPath: directory)
    }

    @Test("a root host's container whose image cannot be mounted fails the launch: it never runs unbounded")
    func unmountableImageFailsClosed() async throws {
        try #require(getuid() == 0)
        let world = try ExtensionWorld()
        let bundle = try ContainerTests.installProbe("org.example.broken", in: world)
        let containers = world.locations.containers
        _ = try containers.prepareImage("org.example.other", bytes: 1 << 20, inodes: 16, uid: 65534, gid: 65534)  // makes .images
        let image = containers.imagePath(of: "org.example.broken")
        try Fixtures.writeFile(image, Array(repeating: 0, count: 1 << 20), mode: 0o600)
        let (monitor, identity) = try await ContainerTests.discover("org.example.broken", bundle: bundle, in: world, point: ContainerTests.point(shared: nil))
        defer { monitor.cancel() }
        await #expect {
            _ = try await ContainerTests.ask(identity)
        } throws: { error in
            "\(error)".contains("cannot mount the container's image")
        }
        #expect(!ContainerVolumes.shared.isMounted(image))
        #expect(!Self.mounted(containers.path(of: "org.example.broken")))
        #expect(await HostFixtures.eventually { Self.loops(backing: image).isEmpty })
        #expect(!containers.isInUse("org.example.broken"))
    }
}
