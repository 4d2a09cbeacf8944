import Foundation
import Testing
@testable import SandboxPolicy
import TestSupport

@Suite("Search path", .offThePool)
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

    @Test func defaultIsTheInstallPrefixAndEtcOnly() throws {
        // Policies next to the executable or in an ancestor are not looked at: only
        // PREFIX/share/extsandbox/policies (PREFIX from the executable's real path) and /etc.
        let prefix = try makeTemporaryDirectory()
        let bin = prefix.appendingPathComponent("bin")
        for dir in ["bin/Policies", "Policies", "share/extsandbox/policies"] {
            try FileManager.default.createDirectory(at: prefix.appendingPathComponent(dir), withIntermediateDirectories: true)
        }
        let exe = bin.appendingPathComponent("extsandbox")
        _ = FileManager.default.createFile(atPath: exe.path, contents: Data("#!/bin/true\n".utf8))
        let share = prefix.appendingPathComponent("share/extsandbox/policies").path
        let installed = PolicySearchPath.default(executablePath: exe.path, environment: [:])
        #expect(installed.directories == [share, "/etc/extsandbox/policies"])

        // A symbolic link to the executable: the prefix is the real file's.
        let elsewhere = try makeTemporaryDirectory().appendingPathComponent("bin")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: elsewhere.appendingPathComponent("xsb").path, withDestinationPath: exe.path)
        let linked = PolicySearchPath.default(executablePath: elsewhere.appendingPathComponent("xsb").path, environment: [:])
        #expect(linked.directories == [share, "/etc/extsandbox/policies"])

        // The CLI's commands in PREFIX/libexec/extsandbox: the same prefix. Another libexec
        // directory is not taken for it.
        #expect(PolicySearchPath.installDirectory(executablePath: "/opt/x/libexec/extsandbox/extsandbox-commands")
                == "/opt/x/share/extsandbox/policies")
        #expect(PolicySearchPath.installDirectory(executablePath: "/opt/x/libexec/other/tool") == "/opt/x/libexec/share/extsandbox/policies")
        #expect(PolicySearchPath.installDirectory(executablePath: "/opt/x/lib/extsandbox/tool") == "/opt/x/lib/share/extsandbox/policies")

        // From the build tree: no ancestor walk up to the checkout's Policies.
        let build = PolicySearchPath.default(executablePath: packageRoot.appendingPathComponent(".build/debug/extsandbox").path, environment: [:])
        #expect(!build.directories.contains(packageRoot.appendingPathComponent("Policies").path), "\(build.directories)")
    }

    @Test func theEnvironmentNamesTheDevelopmentDirectory() {
        let env = PolicySearchPath.default(executablePath: "/x/bin/extsandbox", environment: ["EXTSANDBOX_POLICIES_DIR": "/opt/p"])
        #expect(env.directories == ["/opt/p", "/etc/extsandbox/policies"])
        let empty = PolicySearchPath.default(executablePath: "/x/bin/extsandbox", environment: ["EXTSANDBOX_POLICIES_DIR": ""])
        #expect(empty.directories == ["/x/share/extsandbox/policies", "/etc/extsandbox/policies"])
    }

    @Test func aNameFoundNowhereSaysHowToUseACheckout() {
        let path = PolicySearchPath(directories: ["/nonexistent/a", "/nonexistent/b"])
        #expect {
            try path.locate(name: "standard")
        } throws: { error in
            ((error as? PolicyError)?.message ?? "").hasSuffix("set EXTSANDBOX_POLICIES_DIR=CHECKOUT/Policies")
        }
    }
}
