import Foundation
import Glibc
import Testing
import TestSupport

/// No sandbox leaves a device node in a writable bind: not even the 0:0 character device the
/// kernel lets anyone make, which overlayfs, tar and rsync on the host take for a whiteout.
@Suite("No device nodes in writable binds", .offThePool)
struct DeviceNodeTests {
    /// Before: both calls worked under standard and restricted, and the host directory held a
    /// `c--------- 0,0` owned by the sandbox's user.
    @Test("renameat2(RENAME_WHITEOUT) and mknod(S_IFCHR 0:0) fail, at every level, and the host sees no device",
          arguments: ["standard", "restricted", "hardened"], Fixtures.Caller.allCases)
    func noWhiteouts(level: String, caller: Fixtures.Caller) async throws {
        let dir = try TestPaths.directoryForEitherCaller("devices")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for check in ["whiteout-rename", "whiteout-mknod"] {
            let result = try await Fixtures.run(
                [Fixtures.cli, "exec", "--policy", Fixtures.policyPath(level, for: caller), "--bind", "\(dir):/w", "--",
                 Fixtures.probe, check, "/w"], as: caller)
            let context = Comment(rawValue: "\(level), \(check) as \(caller): status \(result.status)\n\(result.stdout)\(result.stderr)")
            if level == "hardened" {
                // hardened lets no file be made at all: open(O_CREAT) fails with EACCES (so the
                // rename has nothing to rename) and mknodat kills, the policy's answer.
                #expect(!result.stdout.contains("ESCAPED"), context)
                #expect(result.status == 128 + SIGSYS || result.stdout.contains("FAILED create"), context)
            } else {
                #expect(result.status == 0, context)
                #expect(result.stdout.contains("\(check): blocked (EPERM)"), context)
            }
        }
        for name in try FileManager.default.contentsOfDirectory(atPath: dir) {
            var info = stat()
            try #require(lstat(dir + "/" + name, &info) == 0)
            let type = info.st_mode & S_IFMT
            #expect(type != S_IFCHR && type != S_IFBLK, "\(level) as \(caller) left the device \(name) in \(dir)")
        }
    }
}
