import ExtSandbox
import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// The containers' directory on the host: layout and permissions, links a sandbox may plant,
/// and the owner's `list` and `reset` (docs/containers.md).
@Suite("Container store")
struct ContainerStoreTests {
    static func mode(_ path: String) -> (uid: uid_t, mode: mode_t)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return (info.st_uid, info.st_mode & 0o7777)
    }

    @Test("a root caller's containers: a root-owned 0700 directory, each container owned by 65534, 0700")
    func rootLayout() throws {
        let world = try ExtensionWorld()
        let containers = world.locations.containers
        let name = try ExtensionContainers.name(identifier: "org.example.data")
        let path = try containers.prepare(name, uid: 65534, gid: 65534)
        #expect(path == world.containers + "/org.example.data")
        #expect(Self.mode(world.containers)! == (0, 0o700))
        #expect(Self.mode(path)! == (65534, 0o700))
        // A sandbox that opened up its bind's root gets 0700 back at the next launch.
        chmod(path, 0o777)
        _ = try containers.prepare(name, uid: 65534, gid: 65534)
        #expect(Self.mode(path)! == (65534, 0o700))
        // A directory someone opened up is made private again.
        chmod(world.containers, 0o755)
        _ = try containers.prepare(name, uid: 65534, gid: 65534)
        #expect(Self.mode(world.containers)! == (0, 0o700))
        // Bundled extensions' containers carry their host; shared ones live apart.
        #expect(try ExtensionContainers.name(identifier: "org.example.data", bundledWith: "org.example.host") == "org.example.data@org.example.host")
        let shared = try containers.prepare(try ExtensionContainers.sharedName("org.example.group", host: "org.example.host"), uid: 65534, gid: 65534)
        #expect(shared == world.containers + "/shared/org.example.group@org.example.host")
        #expect(Self.mode(world.containers + "/shared")! == (0, 0o700))
    }

    @Test("names that could leave the directory are refused", arguments: ["../x", ".hidden", "a/b", "", "x\ny", "..", "ü"])
    func badNames(_ name: String) {
        #expect(throws: CatalogProblem.self) { try ExtensionContainers.name(identifier: name) }
        #expect(throws: CatalogProblem.self) { try ExtensionContainers.sharedName(name, host: "org.example.host") }
    }

    @Test("a container replaced by a link is refused, never followed")
    func containerReplacedByLink() throws {
        let world = try ExtensionWorld()
        let containers = world.locations.containers
        let elsewhere = try containers.prepare("org.example.victim", uid: 65534, gid: 65534)
        _ = try containers.prepare("org.example.data", uid: 65534, gid: 65534)
        rmdir(world.containers + "/org.example.data")
        symlink(elsewhere, world.containers + "/org.example.data")
        #expect(throws: CatalogProblem.self) { try containers.prepare("org.example.data", uid: 65534, gid: 65534) }
    }

    @Test("links planted in a container redirect neither its size nor its reset")
    func plantedLinks() throws {
        let world = try ExtensionWorld()
        let containers = world.locations.containers
        let victim = try containers.prepare("org.example.victim", uid: 0, gid: 0)
        try Fixtures.writeFile(victim + "/keep", Array(repeating: 7, count: 100_000), mode: 0o600)
        let path = try containers.prepare("org.example.data", uid: 0, gid: 0)
        try Fixtures.writeFile(path + "/file", Array(repeating: 1, count: 10_000), mode: 0o600)
        symlink(victim, path + "/to-victim")
        symlink("/", path + "/to-root")
        symlink("../org.example.victim", path + "/relative")
        mkdir(path + "/locked", 0o700)
        try Fixtures.writeFile(path + "/locked/inner", [1, 2, 3], mode: 0o600)
        chmod(path + "/locked", 0)
        let odd: [CChar] = [0x66, CChar(bitPattern: 0xff), 0x2e, 0]  // not UTF-8
        let fd = open(path + "/" + "x", O_CREAT | O_WRONLY, 0o600)
        close(fd)
        _ = odd.withUnsafeBufferPointer { name in
            path.withCString { dir in
                let dirFD = open(dir, O_RDONLY | O_DIRECTORY)
                defer { close(dirFD) }
                return renameat(dirFD, "x", dirFD, name.baseAddress!)
            }
        }
        let usage = try #require(containers.usage("org.example.data"))
        // The container, file, 3 links, locked/, inner, the odd name: 8; the victim's 100 kB not counted.
        #expect(usage.inodes == 8)
        #expect(usage.bytes < 90_000)
        #expect(try containers.reset("org.example.data"))
        #expect(Self.mode(path) == nil)
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim + "/keep")).count == 100_000)
        #expect(Self.mode("/usr/bin") != nil)
        #expect(try !containers.reset("org.example.data"))
        // Nothing is left beside it.
        let left = try FileManager.default.contentsOfDirectory(atPath: world.containers).sorted()
        #expect(left == [".locks", "org.example.victim"])
    }

    @Test("list shows a container's size; reset empties it, refuses while it is held, and works after the bundle is gone")
    func listAndReset() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.data")
        let containers = world.locations.containers
        let path = try containers.prepare("org.example.data", uid: 65534, gid: 65534)
        try Fixtures.writeFile(path + "/cache", Array(repeating: 9, count: 64 << 10), mode: 0o600)
        let list = try await world.cli(["list", "--json"])
        let rows = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]] ?? []
        let row = try #require(rows.first { $0["identifier"] as? String == "org.example.data" })
        #expect((row["containerBytes"] as? Int ?? 0) >= 64 << 10)
        #expect(row["containerInodes"] as? Int == 2)
        #expect(try await world.cli(["list"]).stdout.contains("CONTAINER"))

        // A running extension's hold (what a launch takes) makes reset refuse.
        let hold = try containers.holdWhileRunning("org.example.data")
        let refused = try await world.cli(["reset", "org.example.data"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("refusing to reset: the extension is running"))
        #expect(Self.mode(path + "/cache") != nil)
        #expect(containers.isInUse("org.example.data"))
        hold.close()

        // The bundle removed: its container stays until reset.
        try FileManager.default.removeItem(atPath: world.external + "/data.appex")
        #expect(Self.mode(path + "/cache") != nil)
        let reset = try await world.cli(["reset", "org.example.data", "--json"])
        #expect(reset.status == 0, "\(reset.stderr)")
        #expect(reset.stdout.contains("\"changed\":true") || reset.stdout.contains("\"changed\" : true"))
        #expect(Self.mode(path) == nil)
    }

    @Test("the declaration file carries a point's shared container, and list shows it")
    func sharedContainerDeclared() async throws {
        let world = try ExtensionWorld()
        let host = AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      container: .init(bytes: 1 << 20, inodes: 100), sharedContainer: "org.example.host.group")
        try host.writeDeclaration(points: [point], to: world.points + "/host.appext")
        let parsed = try PointDeclarationFile.load(world.points + "/host.appext")
        #expect(parsed.points.first?.sharedContainer == "org.example.host.group")
        try world.install("org.example.data")
        let list = try await world.cli(["list", "--json"])
        #expect(list.stdout.contains("org.example.host.group"), "\(list.stdout)")
        let bad = "schema: 1\nhost: org.example.host\npoints:\n  - name: org.example.host.text\n    shared-container: ../x\n"
        #expect(throws: CatalogProblem.self) { try PointDeclarationFile.parse(bad, path: "x.appext") }
    }
}
