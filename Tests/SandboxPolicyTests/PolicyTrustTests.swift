import Foundation
import Glibc
import Testing
@testable import SandboxPolicy
import TestSupport

/// Issue 9 item 2: a policy is loaded only from files and directories that no one but root and
/// the caller could have written (Sources/SandboxSystem/TrustedPath.swift).
@Suite("Policy trust", .offThePool)
struct PolicyTrustTests {
    /// A directory with a valid policy `p.yaml`.
    static func directoryWithPolicy(_ text: String = minimalPolicy) throws -> URL {
        let dir = try makeTemporaryDirectory()
        try text.write(to: dir.appendingPathComponent("p.yaml"), atomically: true, encoding: .utf8)
        chmod(dir.appendingPathComponent("p.yaml").path, 0o644)
        return dir
    }

    static func message(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch let error as PolicyError {
            return error.description
        } catch {
            return "\(error)"
        }
    }

    @Test func aTrustedPolicyLoadsByPathAndByName() throws {
        let dir = try Self.directoryWithPolicy()
        #expect(try PolicyLoader.load(file: dir.appendingPathComponent("p.yaml").path).name == "p")
        #expect(try PolicyLoader.load(nameOrPath: "p", searchPath: PolicySearchPath(directories: [dir.path])).name == "p")
        // A relative path and ".." are walked like any other.
        let relative = dir.path + "/../" + dir.lastPathComponent + "/./p.yaml"
        #expect(try PolicyLoader.load(file: relative).name == "p")
    }

    @Test func aGroupWritablePolicyFileIsRefusedWithItsPath() throws {
        let dir = try Self.directoryWithPolicy()
        let file = dir.appendingPathComponent("p.yaml").path
        chmod(file, 0o664)
        let byPath = Self.message { _ = try PolicyLoader.load(file: file) }
        #expect(byPath == "\(file): refused: \(file) is writable by its group (gid \(getegid()), mode 664); a policy, its directory and every directory above it must be owned by root or by you and not writable by group or others")
        let byName = Self.message { _ = try PolicyLoader.load(nameOrPath: "p", searchPath: PolicySearchPath(directories: [dir.path])) }
        #expect(byName?.contains("refused: \(file) is writable by its group") == true, "\(byName ?? "loaded")")
        chmod(file, 0o646)
        #expect(Self.message { _ = try PolicyLoader.load(file: file) }?.contains("refused: \(file) is writable by others (mode 646)") == true)
    }

    @Test func aWritableDirectoryAboveThePolicyIsRefused() throws {
        let dir = try Self.directoryWithPolicy()
        let sub = dir.appendingPathComponent("sub")
        try FileManager.default.createDirectory(at: sub, withIntermediateDirectories: false)
        try minimalPolicy.write(to: sub.appendingPathComponent("q.yaml"), atomically: true, encoding: .utf8)
        chmod(dir.path, 0o777)
        defer { chmod(dir.path, 0o755) }
        let message = Self.message { _ = try PolicyLoader.load(file: sub.appendingPathComponent("q.yaml").path) }
        #expect(message?.contains("refused: \(dir.path) is writable by others (mode 777)") == true, "\(message ?? "loaded")")
        // A search-path directory under it: the lookup fails (it is not skipped for an earlier one).
        let fallback = try Self.directoryWithPolicy()
        try minimalPolicy.write(to: fallback.appendingPathComponent("q.yaml"), atomically: true, encoding: .utf8)
        let lookup = Self.message {
            _ = try PolicyLoader.load(nameOrPath: "q", searchPath: PolicySearchPath(directories: [fallback.path, sub.path]))
        }
        #expect(lookup?.hasPrefix("\(sub.path): cannot look up policy \"q\" in this directory: refused: \(dir.path) is writable by others") == true,
                "\(lookup ?? "loaded")")
        #expect(PolicySearchPath(directories: [fallback.path, sub.path]).entries().map(\.directory).allSatisfy { $0 == fallback.path })
    }

    /// In a sticky directory (/tmp) others can add names but not replace ours: the caller's own
    /// directory there passes, a name someone else made there does not.
    @Test func aStickyDirectoryPassesOnlyWhatRootOrTheCallerOwns() throws {
        var template = Array("/tmp/xsb-trust-XXXXXX".utf8CString)
        let dir = try #require(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }.map { String(cString: $0) })
        defer { try? FileManager.default.removeItem(atPath: dir) }
        chmod(dir, 0o755)
        try minimalPolicy.write(toFile: dir + "/p.yaml", atomically: true, encoding: .utf8)
        #expect(try PolicyLoader.load(file: dir + "/p.yaml").name == "p")
        guard geteuid() == 0 else {
            print("skipped: the other-owner half needs root to give a directory to another user (uid \(geteuid()))")
            return
        }
        #expect(chown(dir, 65534, 65534) == 0)
        let message = Self.message { _ = try PolicyLoader.load(file: dir + "/p.yaml") }
        #expect(message?.contains("refused: \(dir) is owned by uid 65534") == true, "\(message ?? "loaded")")
    }

    @Test func extendsAndIncludeTargetsGetTheSameChecks() throws {
        let dir = try Self.directoryWithPolicy()
        try "version: 1\nenvironment:\n  set: {X: y}\n".write(to: dir.appendingPathComponent("frag.yaml"), atomically: true, encoding: .utf8)
        try "version: 1\nextends: ./p.yaml\ninclude: [frag]\n".write(to: dir.appendingPathComponent("top.yaml"), atomically: true, encoding: .utf8)
        let path = PolicySearchPath(directories: [dir.path])
        #expect(try PolicyLoader.load(file: dir.appendingPathComponent("top.yaml").path, searchPath: path).environment.set["X"] == "y")

        chmod(dir.appendingPathComponent("frag.yaml").path, 0o620)
        let included = Self.message { _ = try PolicyLoader.load(file: dir.appendingPathComponent("top.yaml").path, searchPath: path) }
        #expect(included?.contains("cannot include \"frag\": \(dir.path)/frag.yaml: refused: \(dir.path)/frag.yaml is writable by its group") == true,
                "\(included ?? "loaded")")
        chmod(dir.appendingPathComponent("frag.yaml").path, 0o644)
        chmod(dir.appendingPathComponent("p.yaml").path, 0o666)
        let extended = Self.message { _ = try PolicyLoader.load(file: dir.appendingPathComponent("top.yaml").path, searchPath: path) }
        #expect(extended?.contains("cannot extend \"./p.yaml\"") == true && extended?.contains("is writable by others (mode 666)") == true,
                "\(extended ?? "loaded")")
    }

    @Test func symbolicLinksAreFollowedOnlyToTrustedPlaces() throws {
        let dir = try Self.directoryWithPolicy()
        let links = try makeTemporaryDirectory()
        // A link (made by the caller, in a trusted directory) to a trusted directory: followed.
        try FileManager.default.createSymbolicLink(atPath: links.path + "/Policies", withDestinationPath: dir.path)
        #expect(try PolicyLoader.load(nameOrPath: "p", searchPath: PolicySearchPath(directories: [links.path + "/Policies"])).name == "p")
        // A relative link to a file.
        try FileManager.default.createSymbolicLink(atPath: links.path + "/r.yaml", withDestinationPath: "../\(dir.lastPathComponent)/p.yaml")
        #expect(try PolicyLoader.load(file: links.path + "/r.yaml").name == "r")
        // A link into a directory anyone may write: the target is walked, and refused.
        let open = try makeTemporaryDirectory()
        chmod(open.path, 0o777)
        try FileManager.default.createSymbolicLink(atPath: links.path + "/t", withDestinationPath: open.path)
        let message = Self.message { _ = try PolicyLoader.load(file: links.path + "/t/anything.yaml") }
        #expect(message?.contains("refused: \(open.path) is writable by others (mode 777)") == true, "\(message ?? "loaded")")
    }

    @Test func aSymlinkedPolicyDirectoryOwnedByAnotherUserIsRefused() throws {
        guard geteuid() == 0 else {
            print("skipped: giving a directory to another user needs root (this test runs as uid \(geteuid()))")
            return
        }
        // The other user's directory, with a policy in it (mode 755/644: only the owner can write).
        let foreign = try Self.directoryWithPolicy()
        #expect(chown(foreign.path, 65534, 65534) == 0)
        #expect(chown(foreign.appendingPathComponent("p.yaml").path, 65534, 65534) == 0)
        let links = try makeTemporaryDirectory()
        try FileManager.default.createSymbolicLink(atPath: links.path + "/Policies", withDestinationPath: foreign.path)
        let message = Self.message {
            _ = try PolicyLoader.load(nameOrPath: "p", searchPath: PolicySearchPath(directories: [links.path + "/Policies"]))
        }
        #expect(message?.contains("refused: \(foreign.path) is owned by uid 65534, not by root or by you (uid 0)") == true,
                "\(message ?? "loaded")")
        // The file alone, owned by the other user in a directory of ours.
        let mine = try Self.directoryWithPolicy()
        #expect(chown(mine.appendingPathComponent("p.yaml").path, 65534, 65534) == 0)
        let file = Self.message { _ = try PolicyLoader.load(file: mine.appendingPathComponent("p.yaml").path) }
        #expect(file?.contains("is owned by uid 65534") == true, "\(file ?? "loaded")")
        // A symbolic link owned by the other user (in a directory of ours) is not followed.
        #expect(lchown(links.path + "/Policies", 65534, 65534) == 0)
        chown(foreign.path, 0, 0)
        chown(foreign.appendingPathComponent("p.yaml").path, 0, 0)
        let link = Self.message {
            _ = try PolicyLoader.load(nameOrPath: "p", searchPath: PolicySearchPath(directories: [links.path + "/Policies"]))
        }
        #expect(link?.contains("refused: \(links.path)/Policies is a symbolic link owned by uid 65534") == true, "\(link ?? "loaded")")
    }

    @Test func aSymlinkBeforeACombiningMarkIsCheckedAsAComponent() throws {
        guard geteuid() == 0 else {
            print("skipped: giving a symbolic link to another user needs root (this test runs as uid \(geteuid()))")
            return
        }
        // "Policies/\u{301}p.yaml": the slash and the mark are one character, but the kernel
        // walks "Policies" on its own, and so must the trust walk.
        let target = try makeTemporaryDirectory()
        let name = "\u{301}p.yaml"
        try minimalPolicy.write(toFile: target.path + "/" + name, atomically: true, encoding: .utf8)
        chmod(target.path + "/" + name, 0o644)
        let links = try makeTemporaryDirectory()
        try FileManager.default.createSymbolicLink(atPath: links.path + "/Policies", withDestinationPath: target.path)
        #expect(lchown(links.path + "/Policies", 65534, 65534) == 0)
        let message = Self.message { _ = try PolicyLoader.load(file: links.path + "/Policies/" + name) }
        #expect(message?.contains("refused: \(links.path)/Policies is a symbolic link owned by uid 65534") == true, "\(message ?? "loaded")")
    }
}
