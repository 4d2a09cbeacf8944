import Foundation
import Testing
@testable import SandboxPolicy

@Suite("Search path")
struct SearchPathTests {
    @Test func lastDirectoryWins() throws {
        let shipped = try makeTemporaryDirectory()
        let admin = try makeTemporaryDirectory()
        try minimalPolicy.write(to: shipped.appendingPathComponent("p.yaml"), atomically: true, encoding: .utf8)
        try (minimalPolicy + "\ndescription: the admin's\n").write(
            to: admin.appendingPathComponent("p.yaml"), atomically: true, encoding: .utf8)
        try minimalPolicy.write(to: shipped.appendingPathComponent("only-shipped.yaml"), atomically: true, encoding: .utf8)
        let path = PolicySearchPath(directories: [shipped.path, admin.path, "/nonexistent/dir"])
        let p = try PolicyLoader.load(nameOrPath: "p", searchPath: path)
        #expect(p.description == "the admin's")
        #expect(p.name == "p")
        #expect(p.sourcePath == admin.appendingPathComponent("p.yaml").path)
        #expect(try path.locate(name: "only-shipped") == shipped.appendingPathComponent("only-shipped.yaml").path)
        #expect(Set(path.availablePolicies().keys) == ["p", "only-shipped"])
    }

    @Test func unknownNameListsWhereItLooked() throws {
        let dir = try makeTemporaryDirectory()
        try minimalPolicy.write(to: dir.appendingPathComponent("standard.yaml"), atomically: true, encoding: .utf8)
        let path = PolicySearchPath(directories: [dir.path, "/etc/extsandbox/policies"])
        #expect {
            try PolicyLoader.load(nameOrPath: "standrad", searchPath: path)
        } throws: { error in
            let message = (error as? PolicyError)?.message ?? ""
            return message.hasPrefix("no policy named \"standrad\"; did you mean \"standard\"?")
                && message.contains("looked for standrad.yaml in: \(dir.path), /etc/extsandbox/policies")
        }
    }

    @Test func pathsAreNotLookedUp() throws {
        let dir = try makeTemporaryDirectory()
        let file = dir.appendingPathComponent("mine.yaml")
        try minimalPolicy.write(to: file, atomically: true, encoding: .utf8)
        let empty = PolicySearchPath(directories: [])
        #expect(try PolicyLoader.load(nameOrPath: file.path, searchPath: empty).name == "mine")
        #expect(throws: PolicyError.self) { try PolicyLoader.load(nameOrPath: "mine.yaml", searchPath: empty) }
        #expect(throws: PolicyError.self) { try PolicyLoader.load(nameOrPath: "mine", searchPath: empty) }
    }

    @Test func defaultFindsTheCheckoutFromABuildDirectory() {
        let exe = packageRoot.appendingPathComponent(".build/debug/extsandbox").path
        let path = PolicySearchPath.default(executablePath: exe, environment: [:])
        #expect(path.directories == [packageRoot.appendingPathComponent("Policies").path, "/etc/extsandbox/policies"])
    }

    @Test func defaultPrefersTheEnvironmentAndInstallLayouts() throws {
        let env = PolicySearchPath.default(executablePath: "/x/bin/extsandbox", environment: ["EXTSANDBOX_POLICIES_DIR": "/opt/p"])
        #expect(env.directories == ["/opt/p", "/etc/extsandbox/policies"])

        let prefix = try makeTemporaryDirectory()
        let bin = prefix.appendingPathComponent("bin")
        let share = prefix.appendingPathComponent("share/extsandbox/policies")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: share, withIntermediateDirectories: true)
        let installed = PolicySearchPath.default(executablePath: bin.appendingPathComponent("extsandbox").path, environment: [:])
        #expect(installed.directories.first.map { URL(fileURLWithPath: $0).resolvingSymlinksInPath().path }
            == share.resolvingSymlinksInPath().path)

        let nextToIt = bin.appendingPathComponent("Policies")
        try FileManager.default.createDirectory(at: nextToIt, withIntermediateDirectories: true)
        let bundled = PolicySearchPath.default(executablePath: bin.appendingPathComponent("extsandbox").path, environment: [:])
        #expect(bundled.directories.first.map { URL(fileURLWithPath: $0).resolvingSymlinksInPath().path }
            == nextToIt.resolvingSymlinksInPath().path)
    }
}
