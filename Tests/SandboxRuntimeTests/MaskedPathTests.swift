import Foundation
import Glibc
import SandboxPolicy
@testable import SandboxRuntime
import TestSupport
import Testing

/// A mask holds in a running sandbox whatever the host does to the masked file, its directory
/// or their siblings: no mount on the way to it sits on a host file the host could replace.
@Suite("Masks the host cannot detach", .offThePool)
struct MaskedPathTests {
    /// A host tree `data` with `top`, and `dir` holding `secret`, `sibling` and `link` (-> sibling).
    static func tree(_ name: String) throws -> (directory: String, data: String) {
        let (directory, data) = try SandboxPoolTests.dataDirectory(name)
        try FileManager.default.createDirectory(atPath: data + "/dir", withIntermediateDirectories: false)
        try "TOP\n".write(toFile: data + "/top", atomically: false, encoding: .utf8)
        try "SECRET\n".write(toFile: data + "/dir/secret", atomically: false, encoding: .utf8)
        try "SIB\n".write(toFile: data + "/dir/sibling", atomically: false, encoding: .utf8)
        #expect(symlink("sibling", data + "/dir/link") == 0)
        return (directory, data)
    }

    static func put(_ text: String, _ path: String) {
        #expect((try? text.write(toFile: path, atomically: false, encoding: .utf8)) != nil, "writing \(path)")
    }

    /// Waits for a line on stdin, then runs `after`, under a policy that binds `data` at /data
    /// (read-only unless `writable`) and masks /data/dir/secret; the host does `change` once the
    /// sandbox is built. Returns what the sandbox printed.
    static func run(_ data: String, writable: Bool = false, extraMounts: [MountEntry] = [], after: String, change: () -> Void = {}) async throws -> String {
        let input = OutputPipe(), output = OutputPipe()
        var configuration = try SandboxPoolTests.shell("read go; \(after); echo end", stdout: output.writeFD)
        configuration.policy.filesystem.mounts.append(.bind(source: data, destination: "/data", writable: writable, optional: false))
        configuration.policy.filesystem.mounts += extraMounts
        configuration.policy.filesystem.masked.append("/data/dir/secret")
        configuration.standardInput = .fileDescriptor(borrowed(input.readFD))
        let supervisor = try Supervisor()
        let process = try await supervisor.launch(configuration)
        output.closeWriteEnd()
        // The launch has returned: the sandbox's file system is built before the host touches anything.
        change()
        _ = write(input.writeFD, "go\n", 3)
        input.closeWriteEnd()
        let text = await output.waitFor("end\n")
        #expect(await process.waitForExit() == .exited(code: 0))
        return text
    }

    /// What a configuration writer does: a new file renamed over the old one.
    static func renameNewFileOverSecret(_ data: String) {
        put("NEW\n", data + "/dir/secret.tmp")
        #expect(rename(data + "/dir/secret.tmp", data + "/dir/secret") == 0)
    }

    /// Prints /data/top, and /data/dir/secret or "hidden".
    static let topAndSecret = "cat /data/top; cat /data/dir/secret 2>/dev/null || echo hidden"

    struct HostChange: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let change: @Sendable (_ data: String) -> Void
    }

    @Test("the masked file stays hidden in a running sandbox", arguments: [
        HostChange(testDescription: "a new file renamed over it") { data in MaskedPathTests.renameNewFileOverSecret(data) },
        HostChange(testDescription: "it renamed away and a new one made at its path") { data in
            #expect(rename(data + "/dir/secret", data + "/dir/secret.old") == 0)
            MaskedPathTests.put("NEW\n", data + "/dir/secret")
        },
        HostChange(testDescription: "it unlinked and a new one made at its path") { data in
            #expect(unlink(data + "/dir/secret") == 0)
            MaskedPathTests.put("NEW\n", data + "/dir/secret")
        },
        HostChange(testDescription: "its directory renamed away and a new one made with a secret") { data in
            #expect(rename(data + "/dir", data + "/dir.old") == 0)
            #expect(mkdir(data + "/dir", 0o755) == 0)
            MaskedPathTests.put("NEW\n", data + "/dir/secret")
        },
    ])
    func maskHolds(_ host: HostChange) async throws {
        let (directory, data) = try Self.tree("mask-holds")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let text = try await Self.run(data, after: "cat /data/dir/secret 2>/dev/null || echo hidden") { host.change(data) }
        #expect(text == "hidden\nend\n", "the sandbox saw the host's new file")
    }

    @Test("a masked file missing at the launch stays out when the host makes it later; its siblings stay")
    func missingFileMadeLater() async throws {
        let (directory, data) = try Self.tree("mask-missing-file")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(unlink(data + "/dir/secret") == 0)
        let script = "cat /data/dir/secret 2>/dev/null || echo hidden; ls /data/dir; cat /data/top"
        let text = try await Self.run(data, after: script) { Self.put("NEW\n", data + "/dir/secret") }
        #expect(text == "hidden\nlink\nsibling\nTOP\nend\n", "the sandbox saw the host's new file")
    }

    @Test("a masked file whose directory is missing at the launch stays out when the host makes both later")
    func missingDirectoryMadeLater() async throws {
        let (directory, data) = try Self.tree("mask-missing-dir")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.removeItem(atPath: data + "/dir")
        let script = "cat /data/dir/secret 2>/dev/null || echo hidden; ls /data"
        let text = try await Self.run(data, after: script) {
            #expect(mkdir(data + "/dir", 0o755) == 0)
            Self.put("NEW\n", data + "/dir/secret")
        }
        #expect(text == "hidden\ntop\nend\n", "the sandbox saw the host's new directory")
    }

    @Test("a hard link of the masked file beside it fails the launch, naming both: it would show what the mask hides")
    func hardLinkBesideTheMask() async throws {
        let (directory, data) = try Self.tree("mask-hard-link")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(link(data + "/dir/secret", data + "/dir/copy") == 0)
        var configuration = try SandboxPoolTests.shell("cat /data/dir/copy")
        configuration.policy.filesystem.mounts.append(.bind(source: data, destination: "/data", writable: false, optional: false))
        configuration.policy.filesystem.masked.append("/data/dir/secret")
        await #expect {
            _ = try await Supervisor().launch(configuration)
        } throws: { error in
            guard let error = error as? SandboxError else { return false }
            return error.step == .bindMount && error.detail.contains("/data/dir/copy is another name of /data/dir/secret")
        }
    }

    @Test("a bind the sandbox's own host ids cannot reach (the supervisor's detached tree) is bound back the same way")
    func detachedTree() async throws {
        let (directory, data) = try Self.tree("mask-tree")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A root caller's sandbox is nobody on the host: it cannot search a 0700 directory of
        // root's, so the supervisor hands the bind over as a detached mount.
        #expect(chmod(directory, 0o700) == 0)
        let text = try await Self.run(data, after: Self.topAndSecret) { Self.renameNewFileOverSecret(data) }
        #expect(text == "TOP\nhidden\nend\n")
    }

    @Test("siblings of a masked file stay readable and read-only, and show only what was there at the launch")
    func siblings() async throws {
        let (directory, data) = try Self.tree("mask-siblings")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let script = """
            cat /data/dir/sibling /data/top; readlink /data/dir/link; cat /data/dir/link
            [ -e /data/dir/added ] || echo no-added
            (echo x > /data/dir/sibling) 2>/dev/null || echo sibling-read-only
            touch /data/dir/new 2>/dev/null || echo dir-read-only
            touch /data/new 2>/dev/null || echo top-read-only
            """
        let text = try await Self.run(data, after: script) {
            MaskedPathTests.put("NEW\n", data + "/dir/sibling.tmp")
            #expect(rename(data + "/dir/sibling.tmp", data + "/dir/sibling") == 0)
            Self.put("ADDED\n", data + "/dir/added")
        }
        #expect(text == "SIB\nTOP\nsibling\nSIB\nno-added\nsibling-read-only\ndir-read-only\ntop-read-only\nend\n")
    }

    @Test("under a writable bind, the bound-back entries stay writable; the directories on the way to a mask are the sandbox's, read-only")
    func writableBind() async throws {
        let (directory, data) = try Self.tree("mask-writable")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The host would let the sandbox (nobody, for a root caller) write the file and the directory.
        #expect(chmod(data + "/dir/sibling", 0o666) == 0 && chmod(data + "/dir", 0o777) == 0)
        let script = """
            echo changed > /data/dir/sibling && echo sibling-written
            touch /data/dir/new 2>/dev/null || echo dir-read-only
            cat /data/dir/secret 2>/dev/null || echo hidden
            """
        let text = try await Self.run(data, writable: true, after: script)
        #expect(text == "sibling-written\ndir-read-only\nhidden\nend\n")
        #expect((try? String(contentsOfFile: data + "/dir/sibling", encoding: .utf8)) == "changed\n", "the write reached the host file")
    }

    @Test("a bind nested below a masked bind stays when the host replaces the directory it covers")
    func nestedBind() async throws {
        let (directory, data) = try Self.tree("mask-nested")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let other = directory + "/other"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: data + "/dir/nested", withIntermediateDirectories: false)
        try "OTHER\n".write(toFile: other + "/file", atomically: false, encoding: .utf8)
        let nested = MountEntry.bind(source: other, destination: "/data/dir/nested", writable: false, optional: false)
        let text = try await Self.run(data, extraMounts: [nested], after: "cat /data/dir/nested/file") {
            #expect(mkdir(data + "/dir/nested.new", 0o755) == 0)
            Self.put("HOST\n", data + "/dir/nested.new/file")
            #expect(rename(data + "/dir/nested.new", data + "/dir/nested") == 0)
        }
        #expect(text == "OTHER\nend\n")
    }

    @Test("a path bound twice with a mask below: the later bind wins, bound back entry by entry")
    func boundTwice() async throws {
        let (directory, data) = try Self.tree("mask-twice")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let again = MountEntry.bind(source: data, destination: "/data", writable: false, optional: false)
        let text = try await Self.run(data, extraMounts: [again], after: Self.topAndSecret) { Self.renameNewFileOverSecret(data) }
        #expect(text == "TOP\nhidden\nend\n")
    }

    @Test("MountPlan: a pre-built sandbox rechecks the host files under nested binds, except below a bind with a mask")
    func nestedMountPoints() throws {
        let (directory, data) = try Self.tree("mask-plan")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var policy = try Fixtures.standardPolicy()
        for (source, destination) in [(data, "/a"), (data + "/dir", "/a/n"), (data, "/b"), (data + "/dir", "/b/n")] {
            policy.filesystem.mounts.append(.bind(source: source, destination: destination, writable: false, optional: false))
        }
        policy.filesystem.masked.append("/b/dir/secret")
        let plan = try MountPlan(policy: policy, extraMounts: [], hostname: "extsandbox", uid: 1000, gid: 1000)
        #expect(plan.nestedMountPoints.filter { $0.hasPrefix(directory) } == [data + "/n"])
    }
}
