import ExtensionCatalog
import ExtSandboxWire
import Foundation
import Glibc
import Testing
import TestSupport
@testable import ExtSandbox

/// Trust over an extension's life: updates by the same signer through a running monitor, the
/// administrator's approvals and bans against a user file that disagrees, install and uninstall
/// (with the discovery monitor's tests: the same worlds, hosts and waits).
extension MonitorTests {

    func manifest(_ identifier: String, version: String) -> String {
        """
        schema: 1
        identifier: \(identifier)
        name: Echo
        version: "\(version)"
        point: \(ExtensionWorld.openPoint)
        executable: bin/run
        """
    }

    /// Writes a new version of the echo extension into `path` (the executable's bytes differ:
    /// one byte appended, which the ELF loader ignores) and signs it with `key`.
    func update(_ world: ExtensionWorld, _ path: String, identifier: String, version: String, key: SigningKey, extra: UInt8) throws {
        try world.write(path + "/extension.yaml", manifest(identifier, version: version))
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: Self.echo)))
        bytes.append(extra)
        try Fixtures.writeFile(path + "/bin/.run.new", bytes, mode: 0o755)
        rename(path + "/bin/.run.new", path + "/bin/run")
        try BundleSigning.sign(bundleAt: path, with: key)
    }

    func echoes(_ identity: AppExtensionIdentity) async throws -> Bool {
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        let reply = try await connection.send(ExtensionMessage(Array("hello".utf8)))
        return String(decoding: reply.payload, as: UTF8.self) == "hello"
    }

    /// The echo extension, version 1.0, signed by a new key and approved; a monitor of its point.
    func signedAndApproved(_ world: ExtensionWorld, _ id: String) async throws -> (path: String, key: SigningKey, monitor: AppExtensionPoint.Monitor) {
        let key = SigningKey.generate()
        let path = try world.install(id, manifest: manifest(id, version: "1.0"), executableSource: Self.echo)
        try BundleSigning.sign(bundleAt: path, with: key)
        #expect(try await world.cli(["approve", id]).status == 0)
        return (path, key, try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world)))
    }

    @Test func anUpdateBySameSignerKeepsTheApprovalThroughARunningMonitor() async throws {
        let world = try ExtensionWorld()
        let id = "org.example.echo"
        let (path, key, monitor) = try await signedAndApproved(world, id)
        #expect(monitor.identities.map(\.version) == ["1.0"])
        #expect(try await echoes(try #require(monitor.identities.first)))

        // A package upgrade: new executable, new version, same key. No new approval needed.
        try update(world, path, identifier: id, version: "1.1", key: key, extra: 1)
        #expect(await eventually(monitor) { $0.identities.map(\.version) == ["1.1"] }, "\(monitor.state)")
        #expect(try await echoes(try #require(monitor.identities.first)))

        // A rollback to a lower version, validly signed by the same key: unapproved, and the
        // monitor says why.
        try update(world, path, identifier: id, version: "0.9", key: key, extra: 2)
        #expect(await eventually(monitor) { $0.reasons[id] == "version 0.9 is lower than the approved 1.0 (a rollback)" }, "\(monitor.state)")
        #expect(monitor.identities.isEmpty && monitor.state.unapprovedCount == 1)

        // Another developer's key over version 2.0: unapproved too.
        let other = SigningKey.generate()
        try update(world, path, identifier: id, version: "2.0", key: other, extra: 3)
        #expect(await eventually(monitor) { $0.reasons[id]?.hasPrefix("it is signed by another key") == true }, "\(monitor.state)")
        let list = try await world.cli(["list", "--json"])
        #expect(list.stdout.contains("\"signer\" : \"\(other.publicKey)\""), "\(list.stdout)")
    }

    @Test func aLaunchRunsOnlyTheExecutableTheSignatureLists() async throws {
        let world = try ExtensionWorld()
        let (path, _, monitor) = try await signedAndApproved(world, "org.example.echo")
        let identity = try #require(monitor.identities.first)
        // Changed after discovery, not re-signed: the launch is refused.
        try world.replaceExecutable(of: path, script: "exit 0")
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            "\(error)".contains("bin/run changed since the bundle was signed")
        }
    }

    @Test func theAdministratorsBanWinsOverTheUsersApproval() async throws {
        let world = try ExtensionWorld()
        let id = "org.example.banned"
        try world.install(id, executableSource: Self.echo)
        #expect(try await world.cli(["approve", id]).status == 0)
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))
        #expect(monitor.identities.map(\.bundleIdentifier) == [id])

        let forbid = try await world.cli(["forbid", id])
        #expect(forbid.status == 0, "\(forbid.stderr)")
        #expect(await eventually(monitor) { $0.identities.isEmpty && $0.forbiddenCount == 1 }, "\(monitor.state)")
        #expect(monitor.state.reasons[id] == "forbidden by the administrator (\(world.systemStateFile))")
        let states = try await world.states()
        #expect(states[id] == "forbidden")
        // The user's approval is still in their file, and approving again does not help.
        #expect(try String(contentsOfFile: world.stateFile, encoding: .utf8).contains("approved \(id) "))
        let approve = try await world.cli(["approve", id])
        #expect(approve.status == 1)
        #expect(approve.stderr.contains("no approval overrides a ban"), "\(approve.stderr)")

        #expect(try await world.cli(["forbid", "--lift", id]).status == 0)
        #expect(await eventually(monitor) { $0.identities.map(\.bundleIdentifier) == [id] }, "\(monitor.state)")
    }

    @Test func theAdministratorsApprovalHoldsForEveryUserAndSaysSo() async throws {
        let world = try ExtensionWorld()
        let id = "org.example.admin"
        let path = try world.install(id)
        // The user's own approval is stale (made for other contents); the system's holds.
        #expect(try await world.cli(["approve", id]).status == 0)
        try world.replaceExecutable(of: path, script: "exit 2")
        #expect(try await world.states()[id] == "unapproved")
        let approve = try await world.cli(["approve", "--system", id])
        #expect(approve.status == 0, "\(approve.stderr)")
        let list = try await world.cli(["list", "--json"])
        let rows = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]] ?? []
        let row = try #require(rows.first { $0["identifier"] as? String == id })
        #expect(row["state"] as? String == "enabled")
        #expect(row["decidedBy"] as? String == "system")
        // The user may still turn it off for themselves.
        #expect(try await world.cli(["disable", id]).status == 0)
        #expect(try await world.states()[id] == "disabled")
    }

    @Test func aSystemFileNotOwnedByRootIsRefused() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.any")
        try world.write(world.systemStateFile, "extsandbox-approvals 1\napproved org.example.any executable=sha256:\(String(repeating: "0", count: 64)) manifest=sha256:\(String(repeating: "0", count: 64))\n")
        // nobody owns the file and its directory: the walk would pass for nobody, the owner check does not.
        chown(world.systemStateFile, 65534, 65534)
        chown((world.systemStateFile as NSString).deletingLastPathComponent, 65534, 65534)
        let output = try await Fixtures.run([TestPaths.cli, "list"], as: .nobody, environment: world.environment)
        #expect(output.status == 1)
        #expect(output.stderr.contains("\(world.systemStateFile): refused: the system approvals file is owned by uid 65534, not by root"), "\(output.stderr)")
    }

    @Test func installShowsWhatItMayDoCopiesAtomicallyAndUninstallRemoves() async throws {
        let world = try ExtensionWorld()
        let source = world.root + "/build"
        let key = SigningKey.generate()
        let bundle = try world.install("org.example.fresh", in: source, manifest: manifest("org.example.fresh", version: "3.1"), executableSource: Self.echo)
        try BundleSigning.sign(bundleAt: bundle, with: key)
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: host(world))

        let install = try await world.cli(["install", bundle, "--approve"])
        #expect(install.status == 0, "\(install.stderr)")
        for line in ["installed org.example.fresh 3.1 (Echo) at \(world.external)/fresh.appex", "point:     \(ExtensionWorld.openPoint) of \(ExtensionWorld.hostIdentifier)",
                     "level:     standard", "network:   none", "signer:    \(key.publicKey)", "approved org.example.fresh"] {
            #expect(install.stdout.contains(line), "\(line) in \(install.stdout)")
        }
        #expect(await eventually(monitor) { $0.identities.map(\.bundleIdentifier) == ["org.example.fresh"] }, "\(monitor.state)")
        #expect(try await echoes(try #require(monitor.identities.first)))
        // Nothing but the bundle is left in the location.
        #expect(try FileManager.default.contentsOfDirectory(atPath: world.external) == ["fresh.appex"])

        // Its container (data it wrote) outlives the bundle, and the owner is told so.
        let container = try world.locations.containers.prepare("org.example.fresh", uid: getuid(), gid: getgid())
        try world.write(container + "/index", "kept")
        let uninstall = try await world.cli(["uninstall", "org.example.fresh"])
        #expect(uninstall.status == 0, "\(uninstall.stderr)")
        #expect(uninstall.stdout.contains("Its container (") && uninstall.stdout.contains("\(container)) stays")
                && uninstall.stdout.contains("extsandbox reset org.example.fresh"), "\(uninstall.stdout)")
        #expect(FileManager.default.fileExists(atPath: container + "/index"))
        #expect(await eventually(monitor) { $0 == AppExtensionPoint.Monitor.State() }, "\(monitor.state)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: world.external) == [])
    }

    @Test func installRefusesABrokenSignature() async throws {
        let world = try ExtensionWorld()
        let bundle = try world.install("org.example.tampered", in: world.root + "/build")
        try BundleSigning.sign(bundleAt: bundle, with: SigningKey.generate())
        try world.write(bundle + "/extra", "added later")
        let install = try await world.cli(["install", bundle])
        #expect(install.status == 1)
        #expect(install.stderr.contains("its signature is broken: extra was added after the bundle was signed"), "\(install.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: world.external) == [])
    }

    /// Before: the install directory and the directory of a copy already installed were compared
    /// as strings, so a copy in a location whose name is another spelling of the install
    /// directory's ("\u{E9}" before "e\u{301}") was taken for one there: the install went ahead,
    /// and its copy was invalid behind the one that comes first.
    @Test func installRefusesACopyBehindOneInALocationSpelledAlike() async throws {
        let world = try ExtensionWorld()
        let first = world.root + "/\u{E9}", last = world.root + "/e\u{301}"
        #expect(mkdir(first, 0o755) == 0 && mkdir(last, 0o755) == 0)
        let installed = try world.install("org.example.spelled", in: first)
        let bundle = try world.install("org.example.spelled", in: world.root + "/build")
        var environment = world.environment
        environment["EXTSANDBOX_EXTENSION_DIRS"] = first + ":" + last
        let install = try await Fixtures.run([TestPaths.cli, "install", bundle], environment: environment)
        #expect(install.status == 1)
        #expect(install.stderr.contains("org.example.spelled is already installed at \(installed), which comes first"), "\(install.stdout)\(install.stderr)")
        #expect(access(last + "/spelled.appex", F_OK) != 0)
    }

    @Test func twoConcurrentInstallsLeaveOneWholeBundle() async throws {
        let world = try ExtensionWorld()
        let key = SigningKey.generate()
        var sources: [String] = []
        // Two builds of one version (so that either approval holds for either bundle), told apart
        // by a file of their own.
        for build in ["a", "b"] {
            let bundle = try world.install("org.example.twice", in: world.root + "/build-\(build)",
                                           manifest: manifest("org.example.twice", version: "1.0"), executableSource: Self.echo)
            try world.write(bundle + "/build-id", build)
            try BundleSigning.sign(bundleAt: bundle, with: key)
            sources.append(bundle)
        }
        for _ in 0..<3 {
            let started = try sources.map { try world.start(["install", $0, "--approve"]) }
            for process in started {
                let output = await process.output()
                #expect(output.status == 0, "\(output.stderr)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: world.external) == ["twice.appex"])
            let installed = try BundleValidator.validate(bundleAt: world.external + "/twice.appex").get()
            guard case .valid(let signature) = BundleSigning.check(installed) else {
                Issue.record("the installed bundle's signature does not hold: \(BundleSigning.check(installed))")
                return
            }
            #expect(signature.entry("build-id") != nil)
            #expect(try await world.states()["org.example.twice"] == "enabled")
        }
    }

    /// A world whose administrator's approvals are at `approvals` below its own, still missing,
    /// `admin` directory.
    static func worldWithAdministrator(approvals: String) throws -> (world: ExtensionWorld, admin: String, locations: ExtensionLocations) {
        let world = try ExtensionWorld()
        let admin = world.root + "/admin"
        try #require(mkdir(admin, 0o755) == 0)
        var locations = world.locations
        locations.systemStateFile = admin + "/" + approvals
        return (world, admin, locations)
    }

    /// Before: while /etc/extsandbox did not exist, the monitor watched /etc in its place, and
    /// every change there (a package upgrade touches dozens of files) started a full scan.
    @Test func anAncestorWatchedForAMissingApprovalsDirectoryWakesOnlyForTheWayToIt() async throws {
        let (world, admin, locations) = try Self.worldWithAdministrator(approvals: "etc/approvals")
        try world.install("org.example.watched", executableSource: Self.echo)
        #expect(try await world.cli(["approve", "org.example.watched"]).status == 0)
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: locations))
        #expect(monitor.identities.map(\.bundleIdentifier) == ["org.example.watched"])
        let create = UInt32(IN_CREATE)
        #expect(!monitor.isRelevant(.init(directory: admin, name: "resolv.conf", mask: create)))
        #expect(monitor.isRelevant(.init(directory: admin, name: "etc", mask: create)))
        #expect(monitor.isRelevant(.init(directory: admin, name: "", mask: UInt32(IN_DELETE_SELF))))
        // The world's root holds the locations too: everything there still counts.
        #expect(monitor.isRelevant(.init(directory: world.root, name: "anything", mask: create)))

        // The administrator's file appearing later, with a ban, still reaches the monitor.
        var environment = world.environment
        environment["EXTSANDBOX_SYSTEM_APPROVALS"] = locations.systemStateFile
        let forbid = try await Fixtures.run([TestPaths.cli, "forbid", "org.example.watched"], environment: environment)
        #expect(forbid.status == 0, "\(forbid.stderr)")
        #expect(await eventually(monitor) { $0.identities.isEmpty && $0.forbiddenCount == 1 }, "\(monitor.state)")
    }

    /// Before: the approvals' directory and the locations were compared as Swift strings, so
    /// with the approvals in a directory whose name is another spelling of a location's (a
    /// precomposed "é", "e" with a combining accent), a change of the approvals was taken for a
    /// change in that location, and ignored: no `.appex` name.
    @Test func approvalsInADirectorySpelledLikeALocationAreStillSeen() async throws {
        let world = try ExtensionWorld()
        let location = world.root + "/e\u{301}", approvals = world.root + "/\u{E9}"
        // The administrator's directory exists too, so the world's root is not watched in its place.
        #expect(mkdir(location, 0o755) == 0 && mkdir(approvals, 0o755) == 0 && mkdir(world.root + "/etc", 0o755) == 0)
        var locations = world.locations
        locations.external = [location]
        locations.stateFile = approvals + "/approvals"
        try world.install("org.example.spelled", in: location, executableSource: Self.echo)
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: locations))
        #expect(monitor.state.unapprovedCount == 1, "\(monitor.state)")
        let create = UInt32(IN_CREATE), moved = UInt32(IN_MOVED_TO)
        #expect(monitor.isRelevant(.init(directory: approvals, name: "approvals", mask: moved)))
        #expect(!monitor.isRelevant(.init(directory: approvals, name: "x.appex", mask: create)))
        #expect(monitor.isRelevant(.init(directory: location, name: "x.appex", mask: create)))
        #expect(!monitor.isRelevant(.init(directory: location, name: "approvals", mask: moved)))

        // The owner's approval, written by another process, reaches the monitor.
        var environment = world.environment
        environment["EXTSANDBOX_EXTENSION_DIRS"] = location
        environment["EXTSANDBOX_STATE_FILE"] = locations.stateFile
        let approve = try await Fixtures.run([TestPaths.cli, "approve", "org.example.spelled"], environment: environment)
        #expect(approve.status == 0, "\(approve.stderr)")
        #expect(await eventually(monitor) { $0.identities.map(\.bundleIdentifier) == ["org.example.spelled"] }, "\(monitor.state)")
    }

    /// Before: the way from a watched ancestor to a missing approvals directory was cut at
    /// characters, and a slash followed by a combining mark is no character "/": the name
    /// that would bring the directory was not on the way.
    @Test func theWayToAMissingApprovalsDirectoryIsCutAtSlashBytes() async throws {
        let (world, admin, locations) = try Self.worldWithAdministrator(approvals: "x/\u{301}y/approvals")
        defer { withExtendedLifetime(world) {} }  // its directory holds the approvals
        let monitor = try await AppExtensionPoint.Monitor(points: [Self.open], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: locations))
        let create = UInt32(IN_CREATE)
        #expect(monitor.isRelevant(.init(directory: admin, name: "x", mask: create)))
        #expect(!monitor.isRelevant(.init(directory: admin, name: "resolv.conf", mask: create)))
    }

    @Test func theDeveloperCommandsGenerateSignAndVerify() async throws {
        let world = try ExtensionWorld()
        let keyFile = world.root + "/signing.key"
        let generate = try await world.cli(["key", "generate", keyFile])
        #expect(generate.status == 0, "\(generate.stderr)")
        let key = try SigningKey.load(keyFile)
        #expect(generate.stdout.contains("public key: \(key.publicKey)"))
        var info = stat()
        #expect(stat(keyFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(try await world.cli(["key", "generate", keyFile]).status == 1)  // never overwritten

        let bundle = try world.install("org.example.cli", in: world.root + "/build")
        let sign = try await world.cli(["sign", bundle, "--key", keyFile])
        #expect(sign.status == 0, "\(sign.stderr)")
        #expect(sign.stdout == "signed org.example.cli 1.0 (3 entries) as \(key.publicKey)\n")
        let verify = try await world.cli(["verify", bundle])
        #expect(verify.status == 0 && verify.stdout.contains("signed by \(key.publicKey)"), "\(verify.stdout)\(verify.stderr)")
        try world.replaceExecutable(of: bundle, script: "exit 9")
        let tampered = try await world.cli(["verify", bundle])
        #expect(tampered.status == 1)
        #expect(tampered.stderr.contains("the signature does not hold: bin/run changed since the bundle was signed"), "\(tampered.stderr)")
    }
}
