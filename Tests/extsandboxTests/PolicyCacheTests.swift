import Foundation
import Glibc
import TestSupport
import Testing

/// The CLI's policy cache end to end (Sources/PolicyTools/PolicyDiskCache.swift); the entry format and
/// its staleness rules are tested in SandboxPolicyTests (PolicyCacheEntryTests).
@Suite("Policy cache of the CLI")
struct PolicyCacheTests {
    /// A policy made of three files (a path, a name on the search path, the file itself), a
    /// private cache, and a way to run the CLI with them.
    struct Setup {
        let dir: String
        var environment: [String: String]
        var cacheDirectory: String { dir + "/cache/extsandbox" }

        init() throws {
            dir = try TestPaths.makePolicyDirectory("pcache").path
            try FileManager.default.createDirectory(atPath: dir + "/cache", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dir + "/policies", withIntermediateDirectories: true)
            chmod(dir + "/cache", 0o700)
            let standard = try String(contentsOfFile: Fixtures.standardPolicyPath, encoding: .utf8)
            try standard.write(toFile: dir + "/base.yaml", atomically: true, encoding: .utf8)
            try "version: 1\nenvironment:\n  set: {FRAG: yes}\n".write(toFile: dir + "/policies/frag.yaml", atomically: true, encoding: .utf8)
            try "version: 1\nextends: ./base.yaml\ninclude: [frag]\n".write(toFile: dir + "/child.yaml", atomically: true, encoding: .utf8)
            environment = ProcessInfo.processInfo.environment
            environment["XDG_CACHE_HOME"] = dir + "/cache"
            environment["EXTSANDBOX_POLICIES_DIR"] = dir + "/policies"
        }

        func run(_ argv: [String], audit: Bool = false) async throws -> Fixtures.Output {
            try await Fixtures.run([Fixtures.cli, "exec", "--policy", dir + "/child.yaml"] + (audit ? ["--audit"] : []) + ["--"] + argv,
                             environment: environment)
        }

        func entries() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: cacheDirectory).filter { !$0.hasPrefix(".") }
        }

        /// The single entry's path, inode and size.
        func entry() throws -> (path: String, inode: UInt64, size: Int) {
            let names = try entries()
            try #require(names.count == 1, "\(names)")
            let path = cacheDirectory + "/" + names[0]
            var info = stat()
            try #require(stat(path, &info) == 0)
            return (path, UInt64(info.st_ino), Int(info.st_size))
        }
    }

    @Test("a hit gives the policy and filter without storing again")
    func hit() async throws {
        let setup = try Setup()
        defer { try? FileManager.default.removeItem(atPath: setup.dir) }
        #expect(try await setup.run([Fixtures.probe, "ptrace"]).status == 159)   // loaded, compiled, stored
        let first = try setup.entry()
        #expect(first.path.hasSuffix(".policy"))

        #expect(try await setup.run([Fixtures.probe, "ptrace"]).status == 159)   // from the cache
        let env = try await setup.run(["/bin/sh", "-c", "echo $FRAG"], audit: true)
        #expect(env.stdout == "yes\n")
        #expect(env.stderr.contains("the policy 'child' would have denied nothing"), "\(env.stderr)")
        let second = try setup.entry()
        #expect(second.inode == first.inode, "a hit does not write the entry again")
    }

    @Test("a truncated, garbled or group-writable entry is not used, and is replaced")
    func damaged() async throws {
        let setup = try Setup()
        defer { try? FileManager.default.removeItem(atPath: setup.dir) }
        #expect(try await setup.run([Fixtures.probe, "ptrace"]).status == 159)
        let good = try setup.entry()
        let bytes = try #require(FileManager.default.contents(atPath: good.path))

        let damages: [(String, (String) throws -> Void)] = [
            ("truncated", { try bytes.prefix(bytes.count / 2).write(to: URL(fileURLWithPath: $0)) }),
            ("garbled", { path in
                var garbled = [UInt8](bytes)
                garbled[garbled.count * 2 / 3] ^= 0x20
                try Data(garbled).write(to: URL(fileURLWithPath: path))
            }),
            ("group-writable", { path in
                try bytes.write(to: URL(fileURLWithPath: path))
                chmod(path, 0o660)
            }),
        ]
        for (label, damage) in damages {
            let before = try setup.entry()
            try damage(before.path)
            let result = try await setup.run([Fixtures.probe, "ptrace"])
            #expect(result.status == 159, "\(label): \(result.stdout) \(result.stderr)")
            let after = try setup.entry()
            #expect(after.size == good.size, "\(label): stored again")
            #expect(after.inode != before.inode, "\(label): stored again")
            var info = stat()
            #expect(stat(after.path, &info) == 0 && info.st_mode & 0o077 == 0, "\(label)")
        }
    }

    @Test("an edited file reached by name is not served from the cache")
    func editedByName() async throws {
        let setup = try Setup()
        defer { try? FileManager.default.removeItem(atPath: setup.dir) }
        #expect(try await setup.run(["/bin/sh", "-c", "echo $FRAG"]).stdout == "yes\n")
        #expect(try await setup.run(["/bin/sh", "-c", "echo $FRAG"]).stdout == "yes\n")
        try "version: 1\nenvironment:\n  set: {FRAG: no}\n".write(toFile: setup.dir + "/policies/frag.yaml", atomically: true, encoding: .utf8)
        #expect(try await setup.run(["/bin/sh", "-c", "echo $FRAG"]).stdout == "no\n")
        #expect(try setup.entries().count == 1)
    }

    @Test("EXTSANDBOX_NO_CACHE=1 neither reads nor writes the cache")
    func noCache() async throws {
        var setup = try Setup()
        defer { try? FileManager.default.removeItem(atPath: setup.dir) }
        setup.environment["EXTSANDBOX_NO_CACHE"] = "1"
        #expect(try await setup.run([Fixtures.probe, "ptrace"]).status == 159)
        #expect(!FileManager.default.fileExists(atPath: setup.cacheDirectory))
    }
}
