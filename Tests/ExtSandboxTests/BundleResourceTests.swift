import ExtSandbox
import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// A bundle's resources are data: the approval pins the executable and the manifest, not the
/// resources, so nothing under /extension may run as code (exec'd, used as an interpreter or a
/// loader, or mapped executable as a library). Reading them works as before.
@Suite("Bundle resources are data")
struct BundleResourceTests {
    static let probe = """
        import subprocess, ctypes
        def probe():
            out = []
            try:
                subprocess.run(["/extension/share/tool"], check=True)
                out.append("exec:ran")
            except PermissionError:
                out.append("exec:EACCES")
            except Exception as e:
                out.append("exec:" + type(e).__name__)
            try:
                ctypes.CDLL("/extension/share/libz.so")
                out.append("map:loaded")
            except OSError:
                out.append("map:refused")
            out.append("read:" + open("/extension/share/data.txt").read().strip())
            return " ".join(out).encode()
        """

    @Test("a resource cannot be exec'd or mapped executable, and can be read")
    func resourcesAreNotCode() async throws {
        let world = try ExtensionWorld()
        let bundle = world.external + "/Resources.appex"
        try world.write(bundle + "/extension.yaml", """
            schema: 1
            identifier: org.example.resources
            name: Resources
            version: "1.0"
            point: \(ExtensionWorld.openPoint)
            executable: bin/run
            resources:
              - share/tool
              - share/libz.so
              - share/data.txt
            """)
        try world.write(bundle + "/bin/run", HostFixtures.pythonExtension(reply: "probe()", prelude: Self.probe), mode: 0o755)
        try world.write(bundle + "/share/data.txt", "hello\n")
        for (source, name) in [("/usr/bin/true", "tool"), ("/usr/lib/x86_64-linux-gnu/libz.so.1", "libz.so")] {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
            try Fixtures.writeFile(bundle + "/share/" + name, Array(bytes), mode: 0o755)
        }
        let (monitor, identity) = try await HostFixtures.approveAndDiscover(bundle, identifier: "org.example.resources", in: world)
        defer { monitor.cancel() }
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        let answer = HostFixtures.text(try await connection.send(HostFixtures.message("probe")))
        #expect(answer == "exec:EACCES map:refused read:hello")
    }

    /// Debian's /root is 0700: the sandbox's host uid (nobody) cannot search it, so binding a
    /// resource from a bundle below it by path failed at launch ("bind mount failed: Permission
    /// denied") after `list` had shown the extension enabled.
    @Test("a root host launches an extension from below a 0700 directory and reads its resources")
    func bundleBelowAPrivateDirectory() async throws {
        try #require(geteuid() == 0, "the host must be root")
        let world = try ExtensionWorld()
        let bundle = world.external + "/Private.appex"
        try world.write(bundle + "/extension.yaml", """
            schema: 1
            identifier: org.example.private
            name: Private
            version: "1.0"
            point: \(ExtensionWorld.openPoint)
            executable: bin/run
            resources:
              - share/data.txt
            """)
        try world.write(bundle + "/bin/run", HostFixtures.pythonExtension(
            reply: "open('/extension/share/data.txt').read().strip().encode()"), mode: 0o755)
        try world.write(bundle + "/share/data.txt", "private hello\n")
        #expect(chmod(world.root, 0o700) == 0)
        let (monitor, identity) = try await HostFixtures.approveAndDiscover(bundle, identifier: "org.example.private", in: world)
        defer { monitor.cancel() }
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("read"))) == "private hello")
    }
}
