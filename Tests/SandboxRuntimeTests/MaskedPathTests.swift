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

    /// Runs `before`, prints "ready", waits for a line on stdin, then runs `after`, under a policy
    /// that binds `data` read-only at /data and masks /data/dir/secret; the host does `change`
    /// in between. Returns what the sandbox printed after "ready".
    static func run(_ data: String, after: String, change: () -> Void) async throws -> String {
        let input = OutputPipe(), output = OutputPipe()
        var configuration = try SandboxPoolTests.shell("read go; \(after); echo end", stdout: output.writeFD)
        configuration.policy.filesystem.mounts.append(.bind(source: data, destination: "/data", writable: false, optional: false))
        configuration.policy.filesystem.masked.append("/data/dir/secret")
        configuration.standardInput = .fileDescriptor(input.readFD)
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

    struct HostChange: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let change: @Sendable (_ data: String) -> Void
    }

    @Test("the masked file stays hidden in a running sandbox", arguments: [
        HostChange(testDescription: "a new file renamed over it") { data in
            MaskedPathTests.put("NEW\n", data + "/dir/secret.tmp")
            #expect(rename(data + "/dir/secret.tmp", data + "/dir/secret") == 0)
        },
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
