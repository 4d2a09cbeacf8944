@testable import SandboxExec
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
        ["--json-status-fd", "x", "prog"], ["--json-status-fd", "2", "prog"], ["--json-status-fd=2000", "--json-status-fd=2000", "prog"],
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

    /// A mistyped option before `--` is a usage error that names the option it resembles, never
    /// the program to run (it ran as one, and failed with "command not found").
    @Test("a mistyped option is a usage error with a did-you-mean", arguments: [
        (["--polcy", "standard", "--", "true"], "'--polcy'. Did you mean '--policy'?"),
        (["--ro-bnd=/a", "true"], "'--ro-bnd'. Did you mean '--ro-bind'?"),
        (["-x", "prog"], "'-x'."),
    ])
    func mistypedOption(arguments: [String], expected: String) {
        #expect(ExecRequest.quickParse(arguments[...]) == nil)
        #expect {
            _ = try ExtSandboxCommand.parseAsRoot(["exec"] + arguments)
        } throws: { error in
            let message = ExtSandboxCommand.message(for: error)
            return message.contains("Unknown option " + expected) && ExtSandboxCommand.exitCode(for: error) == .validationFailure
        }
    }
}
