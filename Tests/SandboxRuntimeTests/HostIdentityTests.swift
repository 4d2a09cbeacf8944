import Foundation
import Glibc
@testable import SandboxRuntime
import Testing
import TestSupport

/// Issue 9 item 1a: a root caller's sandbox is never host root.
@Suite("Host identity", .offThePool)
struct HostIdentityTests {
    @Test("uid or gid 0 maps to nobody; other callers keep their ids; an unprivileged gid 0 is refused")
    func mappingRules() throws {
        #expect(try HostIdentity.forCaller(uid: 0, gid: 0, effectiveUID: 0) == HostIdentity(uid: 65534, gid: 65534, remapsRoot: true))
        #expect(try HostIdentity.forCaller(uid: 0, gid: 5, effectiveUID: 0).uid == 65534)
        #expect(try HostIdentity.forCaller(uid: 1000, gid: 1000, effectiveUID: 1000) == HostIdentity(uid: 1000, gid: 1000, remapsRoot: false))
        #expect(throws: SandboxError.self) { try HostIdentity.forCaller(uid: 1000, gid: 0, effectiveUID: 1000) }
    }

    /// Before: the file was owned by host uid 0 and gid 0 (with a setuid bit, a setuid-root
    /// program on the host), and root's supplementary groups came along.
    @Test("as root, what a sandbox creates in a writable bind is owned by nobody, not root")
    func rootCallerCreatesNobodyFiles() async throws {
        guard getuid() == 0 else {
            print("skipped: needs a root caller (the test runs as uid \(getuid()))")
            return
        }
        let dir = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = try await Fixtures.exec(
            ["/bin/sh", "-c", "echo x > /out/file && mkdir /out/dir && grep '^Groups:' /proc/self/status"],
            options: ["--bind", "\(dir):/out"])
        #expect(result.status == 0, "\(result.stderr)")
        for path in [dir + "/file", dir + "/dir"] {
            var info = stat()
            try #require(lstat(path, &info) == 0, "\(path)")
            #expect(info.st_uid != 0 && info.st_gid != 0, "\(path) is owned by \(info.st_uid):\(info.st_gid)")
            #expect(info.st_uid == 65534 && info.st_gid == 65534, "\(path) is owned by \(info.st_uid):\(info.st_gid)")
        }
        // No supplementary group (root's would show as the overflow gid 65534).
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "Groups:", "\(result.stdout)")
    }

    /// Before: /proc/slabinfo (0400 root) was readable, since the sandbox was host uid 0.
    @Test("as root, the sandbox cannot read root-only kernel files such as /proc/slabinfo")
    func rootOnlyProcFiles() async throws {
        guard getuid() == 0 else {
            print("skipped: needs a root caller (the test runs as uid \(getuid()))")
            return
        }
        let result = try await Fixtures.exec(["/bin/sh", "-c", "head -c 20 /proc/slabinfo"])
        #expect(result.status != 0, "\(result.stdout)")
        #expect(result.stderr.contains("Permission denied"), "\(result.stderr)")
    }

    /// A directory a sandbox as nobody may write into (mkdtemp makes 0700 root-owned ones).
    static func temporaryDirectory() throws -> String { try TestPaths.directoryForEitherCaller("identity") }
}
