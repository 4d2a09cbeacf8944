import Foundation
import Glibc
@testable import SandboxRuntime
import Testing
import TestSupport

/// A root caller's sandbox is nobody on the host: what it must see below a directory nobody
/// cannot search (a bundle or a program under a 0700 home) is bound from a detached mount the
/// supervisor made, and only the way there is opened, never the files themselves.
@Suite("Bind sources behind directories the sandbox cannot search", .offThePool)
struct DetachedBindSourceTests {
    /// `base` (0700, root's) holding `data/shared` (0644), `data/private` (0600), `data/inner/`,
    /// `bin/prog` (a script) and `w/` (owned by nobody, as a container is).
    struct Tree {
        let base: String
        var data: String { base + "/data" }

        init() throws {
            var template = Array("/tmp/xsb-detached-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
            base = String(cString: made)
            for directory in ["data", "data/inner", "bin", "w"] {
                try FileManager.default.createDirectory(atPath: base + "/" + directory, withIntermediateDirectories: false)
                chmod(base + "/" + directory, 0o755)
            }
            try Fixtures.writeFile(base + "/data/shared", Array("readable by anyone\n".utf8), mode: 0o644)
            try Fixtures.writeFile(base + "/data/private", Array("root's alone\n".utf8), mode: 0o600)
            try Fixtures.writeFile(base + "/bin/prog", Array("#!/bin/sh\necho the program ran\n".utf8), mode: 0o755)
            chown(base + "/w", HostIdentity.unprivilegedID, HostIdentity.unprivilegedID)
            chmod(base, 0o700)
        }

        func remove() { try? FileManager.default.removeItem(atPath: base) }
    }

    @Test("a directory nobody cannot search is found, by the same rule as the kernel's")
    func searchRule() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let nobody = HostIdentity.unprivilegedID
        #expect(DetachedBindSources.firstUnsearchableDirectory(above: tree.data + "/shared", uid: nobody, gid: nobody) == tree.base)
        #expect(DetachedBindSources.firstUnsearchableDirectory(above: tree.base, uid: nobody, gid: nobody) == nil,
                "the source itself needs no search permission")
        #expect(DetachedBindSources.firstUnsearchableDirectory(above: "/usr/share/doc", uid: nobody, gid: nobody) == nil)
        #expect(DetachedBindSources.firstUnsearchableDirectory(above: tree.data + "/shared", uid: 0, gid: 0) == nil,
                "its owner may search it")
        chmod(tree.base, 0o710)
        chown(tree.base, 0, nobody)
        #expect(DetachedBindSources.firstUnsearchableDirectory(above: tree.data + "/shared", uid: nobody, gid: nobody) == nil,
                "the group's x bit counts for a member of the group")
    }

    /// Before: "bind mount failed: … Permission denied" (the init looked the path up as nobody).
    @Test("as root, a read-only bind below a 0700 directory works, and its files keep their modes")
    func readOnlyBindBelowPrivateDirectory() async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let run = try await Fixtures.exec(
            ["/bin/sh", "-c", "cat /d/shared; cat /d/private 2>&1 || echo refused; touch /d/new 2>&1 || echo read-only"],
            options: ["--ro-bind", "\(tree.data):/d"], as: .root)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("readable by anyone"), "\(run.stdout)")
        #expect(!run.stdout.contains("root's alone") && run.stdout.contains("refused"), "a 0600 file of root's stays closed: \(run.stdout)")
        #expect(run.stdout.contains("read-only"), "\(run.stdout)")
    }

    /// Before: the program under a 0700 directory (a pyenv shim in /root) failed to bind.
    @Test("as root, a program below a 0700 directory runs")
    func programBelowPrivateDirectory() async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let run = try await Fixtures.exec([tree.base + "/bin/prog"], as: .root)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "the program ran\n", "\(run.stdout)")
    }

    @Test("as root, a writable bind below a 0700 directory holds what the sandbox writes, owned by nobody")
    func writableBindBelowPrivateDirectory() async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let run = try await Fixtures.exec(["/bin/sh", "-c", "echo kept > /w/file"], options: ["--bind", "\(tree.base)/w:/w"], as: .root)
        #expect(run.status == 0, "\(run.stderr)")
        var info = stat()
        #expect(stat(tree.base + "/w/file", &info) == 0)
        #expect(info.st_uid == HostIdentity.unprivilegedID, "what the sandbox creates is nobody's, never root's")
        #expect((try? String(contentsOfFile: tree.base + "/w/file", encoding: .utf8)) == "kept\n")
    }

    /// The detached mount is a clone of the host's: were it still a peer of a shared host mount,
    /// the init's bind below it would appear on the host. Checked in a mount namespace of the
    /// test's own whose mounts are shared, so nothing is left on the machine.
    @Test("a bind inside a detached source does not propagate to the host's mounts")
    func nothingPropagatesBack() async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let script = """
            mount --bind \(tree.base) \(tree.base) && mount --make-shared \(tree.base) || exit 3
            "$0" exec --policy "$1" --ro-bind \(tree.data):/d --ro-bind /usr/share/doc:/d/inner -- /bin/sh -c 'ls /d/inner >/dev/null && sleep 2' &
            sleep 1
            grep -c ' \(tree.data)/inner ' /proc/self/mountinfo
            wait $!
            """
        let run = try await Fixtures.run(
            ["/usr/bin/unshare", "--mount", "--propagation", "shared", "--", "/bin/sh", "-c", script,
             Fixtures.cli, Fixtures.policyPath(for: .root)], as: .root)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "the sandbox's bind showed on the host: \(run.stdout)")
    }
}
