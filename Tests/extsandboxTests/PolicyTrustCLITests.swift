import Foundation
import Glibc
import TestSupport
import Testing

/// Issue 9 item 2 through the built CLI: where `extsandbox` looks for policies, and that its
/// policy cache lives only where no one else can write.
@Suite("Policy trust of the CLI")
struct PolicyTrustCLITests {
    /// The environment of a CLI run with no development directory and no cache.
    static var plainEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["EXTSANDBOX_POLICIES_DIR"] = nil
        environment["EXTSANDBOX_NO_CACHE"] = "1"
        return environment
    }

    /// A fresh directory in /tmp that anyone may write (what an attacker can use).
    static func makeWorldWritableDirectory() throws -> String {
        var template = Array("/tmp/xsb-planted-XXXXXX".utf8CString)
        let dir = try #require(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }.map { String(cString: $0) })
        chmod(dir, 0o777)
        return dir
    }

    @Test("a CLI copied under a world-writable directory does not load a planted policy",
          arguments: [("extsandbox", "Policies"), ("bin/extsandbox", "share/extsandbox/policies"), ("a/b/extsandbox", "Policies")])
    func plantedPolicyIsNotLoaded(executable: String, policies: String) async throws {
        let dir = try Self.makeWorldWritableDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let copy = dir + "/" + executable
        try FileManager.default.createDirectory(atPath: (copy as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Fixtures.writeFile(copy, Array(try #require(FileManager.default.contents(atPath: Fixtures.cli))), mode: 0o755)
        // What any local user could write next to (or above) the copy: a `standard` that sets
        // PLANTED=yes in the sandbox's environment.
        try FileManager.default.createDirectory(atPath: dir + "/" + policies, withIntermediateDirectories: true)
        try "version: 1\nextends: \(Fixtures.standardPolicyPath)\nenvironment:\n  set: {PLANTED: \"yes\"}\n"
            .write(toFile: dir + "/" + policies + "/standard.yaml", atomically: true, encoding: .utf8)

        let result = try await Fixtures.run([copy, "exec", "--policy", "standard", "--", "/bin/sh", "-c", "echo PLANTED=$PLANTED"],
                                      environment: Self.plainEnvironment)
        #expect(!result.stdout.contains("PLANTED=yes"), "the planted policy was loaded: \(result.stdout)")
        #expect(result.status != 0)
        // It says where it looked: the planted place is refused, or (a copy right in the planted
        // directory, whose prefix's share directory does not exist) not looked at at all.
        #expect(result.stderr.contains("refused: \(dir) is writable by others (mode 777)")
                || (executable == "extsandbox" && result.stderr.contains("no policy named \"standard\"")), "\(result.stderr)")
    }

    @Test("a group-writable policy file is refused, with its path", arguments: Fixtures.Caller.allCases)
    func groupWritablePolicy(caller: Fixtures.Caller) async throws {
        let dir = try TestPaths.makePolicyDirectory("group-writable").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/mine.yaml"
        try "version: 1\nextends: \(Fixtures.standardPolicyPath)\nlimits:\n  memory-scope: per-process\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o664)
        let result = try await Fixtures.run([Fixtures.cli, "exec", "--policy", file, "--", "/bin/true"], as: caller,
                                      environment: Self.plainEnvironment)
        #expect(result.status == 125, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("\(file): refused: \(file) is writable by its group (gid 0, mode 664)"), "\(result.stderr)")
        // Once fixed, it loads (as root, and as nobody: root owns it and everything above it).
        chmod(file, 0o644)
        let fixed = try await Fixtures.run([Fixtures.cli, "exec", "--policy", file, "--", "/bin/true"], as: caller,
                                     environment: Self.plainEnvironment)
        #expect(fixed.status == 0, "\(fixed.stderr)")
    }

    @Test("the checkout's policies are found through EXTSANDBOX_POLICIES_DIR, also as nobody", arguments: Fixtures.Caller.allCases)
    func developmentDirectory(caller: Fixtures.Caller) async throws {
        var environment = TestPaths.environmentWithPolicies(Self.plainEnvironment)
        let list = try await Fixtures.run([Fixtures.cli, "policy", "list"], as: caller, environment: environment)
        #expect(list.status == 0, "\(list.stderr)")
        #expect(list.stdout.contains("1. \(TestPaths.policiesDirectory)  (the install's policies)"), "\(list.stdout)")
        #expect(list.stdout.contains("standard    \(TestPaths.policiesDirectory)/standard.yaml"), "\(list.stdout)")
        let run = try await Fixtures.run([Fixtures.cli, "exec", "--", "/bin/true"], as: caller, environment: environment)
        // Found and loaded; nobody has no memory cgroup here, so the shipped 1G limit for the
        // whole sandbox fails the launch after the policy loaded (see MemoryScopeTests).
        #expect(run.status == 0 || (caller == .nobody && run.stderr.contains("memory-scope: per-process")), "\(run.stderr)")
        // Without it, the build tree's CLI finds no policy (and says how to name the checkout's).
        environment["EXTSANDBOX_POLICIES_DIR"] = nil
        let none = try await Fixtures.run([Fixtures.cli, "exec", "--", "/bin/true"], as: caller, environment: environment)
        #expect(none.status != 0)
        #expect(none.stderr.contains("set EXTSANDBOX_POLICIES_DIR=CHECKOUT/Policies"), "\(none.stderr)")
    }

    // MARK: The policy cache

    /// Runs `exec --policy standard.yaml -- /bin/true` with `XDG_CACHE_HOME=cache`.
    static func runWithCache(_ cache: String, as caller: Fixtures.Caller = .root) async throws -> Fixtures.Output {
        var environment = ProcessInfo.processInfo.environment
        environment["EXTSANDBOX_NO_CACHE"] = nil
        environment["XDG_CACHE_HOME"] = cache
        return try await Fixtures.run([Fixtures.cli, "exec", "--policy", Fixtures.standardPolicyPath, "--", "/bin/true"],
                                as: caller, environment: environment)
    }

    static func cacheEntries(_ cache: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: cache + "/extsandbox")) ?? []
    }

    @Test("the cache is used in a directory of the caller's own")
    func cacheInOwnDirectory() async throws {
        let dir = try TestPaths.makePolicyDirectory("own-cache").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(mkdir(dir + "/cache", 0o700) == 0)
        #expect(try await Self.runWithCache(dir + "/cache").status == 0)
        #expect(Self.cacheEntries(dir + "/cache").count == 1)
    }

    @Test("the cache refuses a directory owned by another user, or reached through a symlink to one")
    func cacheRefusesForeignDirectories() async throws {
        guard geteuid() == 0 else {
            print("skipped: giving a directory to another user needs root (this test runs as uid \(geteuid()))")
            return
        }
        let dir = try TestPaths.makePolicyDirectory("foreign-cache").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Another user's directory (nobody's), as XDG_CACHE_HOME.
        #expect(mkdir(dir + "/theirs", 0o755) == 0)
        #expect(chown(dir + "/theirs", 65534, 65534) == 0)
        let foreign = try await Self.runWithCache(dir + "/theirs")
        #expect(foreign.status == 0, "a refused cache is a miss, not an error: \(foreign.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/theirs/extsandbox"), "a cache was made in another user's directory")

        // A symbolic link (ours, in our directory) to it: the target is checked, and refused.
        try FileManager.default.createSymbolicLink(atPath: dir + "/link", withDestinationPath: dir + "/theirs")
        #expect(try await Self.runWithCache(dir + "/link").status == 0)
        #expect(!FileManager.default.fileExists(atPath: dir + "/theirs/extsandbox"), "a cache was made through the link")

        // An extsandbox directory in our cache that is a symlink to their directory.
        #expect(mkdir(dir + "/mine", 0o700) == 0)
        try FileManager.default.createSymbolicLink(atPath: dir + "/mine/extsandbox", withDestinationPath: dir + "/theirs")
        #expect(try await Self.runWithCache(dir + "/mine").status == 0)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: dir + "/theirs")) ?? []).isEmpty, "an entry was written through the link")

        // Our own cache directory, but in a directory another user owns (they could swap it).
        #expect(mkdir(dir + "/theirs/cache", 0o700) == 0)
        #expect(try await Self.runWithCache(dir + "/theirs/cache").status == 0)
        #expect(Self.cacheEntries(dir + "/theirs/cache").isEmpty, "a cache was used under another user's directory")
    }

    @Test("the cache refuses a directory its group or others can write")
    func cacheRefusesWritableDirectories() async throws {
        let dir = try TestPaths.makePolicyDirectory("writable-cache").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(mkdir(dir + "/cache", 0o700) == 0)
        chmod(dir + "/cache", 0o770)
        #expect(try await Self.runWithCache(dir + "/cache").status == 0)
        #expect(!FileManager.default.fileExists(atPath: dir + "/cache/extsandbox"), "a group-writable cache home was used")

        let tmp = try Self.makeWorldWritableDirectory()
        defer { try? FileManager.default.removeItem(atPath: tmp) }
        #expect(try await Self.runWithCache(tmp).status == 0)
        #expect(!FileManager.default.fileExists(atPath: tmp + "/extsandbox"), "a world-writable cache home was used")
    }
}
