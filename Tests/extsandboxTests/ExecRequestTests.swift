import ArgumentParser
@testable import extsandbox
import Testing
import TestSupport

/// `exec` has two parsers: a quick one for its common shapes and ArgumentParser for the rest.
/// Whatever the quick one accepts, ArgumentParser must read the same way.
@Suite("extsandbox exec arguments", .offThePool)
struct ExecRequestTests {
    static let accepted: [[String]] = [
        ["--", "/bin/true"],
        ["/bin/true"],
        ["echo", "--policy", "x", "--", "-n"],
        ["--policy", "restricted", "--", "sh", "-c", "echo hi"],
        ["--policy=./my.yaml", "--audit", "--", "/bin/ls", "-l"],
        ["--ro-bind", "/a", "--ro-bind=/b:/c", "--bind", "/d:/e", "--env", "A=1", "--env=B==2", "--chdir", "/tmp", "prog", "arg"],
        ["--audit", "--chdir=/work", "--", "--", "x"],
        ["--verbose", "--audit", "/bin/true"],
        ["--env", "EMPTY=", "--", "python3", "-c", "print(1)"],
    ]

    /// Shapes the quick parser leaves to ArgumentParser (help, errors, anything unusual).
    static let declined: [[String]] = [
        [], ["--"], ["--help"], ["-h"], ["--", "--help"], ["--policy"], ["--policy", "--", "x"],
        ["--policy", "a", "--policy", "b", "x"], ["--audit", "--audit", "x"], ["--verbose", "--verbose", "x"], ["--verbose=1", "x"], ["--audit=yes", "x"],
        ["--env", "NOEQUALS", "x"], ["--env", "=v", "x"], ["--unknown", "x"], ["-x", "prog"],
        ["--chdir=", "x"], ["--version"], ["--policy", "-standard", "x"],
    ]

    @Test("the quick parser reads what ArgumentParser reads", arguments: accepted)
    func agrees(arguments: [String]) throws {
        let quick = try #require(ExecRequest.quickParse(arguments[...]), "declined: \(arguments)")
        let parsed = try #require(try ExtSandboxCommand.parseAsRoot(["exec"] + arguments) as? ExecCommand)
        #expect(quick == parsed.request)
    }

    @Test("anything else goes to ArgumentParser", arguments: declined)
    func declines(arguments: [String]) {
        #expect(ExecRequest.quickParse(arguments[...]) == nil)
    }
}
