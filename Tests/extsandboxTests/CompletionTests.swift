import Foundation
import Glibc
import Testing
import TestSupport

/// Shell completion beyond the options: the completion scripts call the built CLI back
/// (`extsandbox ---completion SUBCOMMAND… -- ARGUMENT WORD-INDEX CURSOR WORDS…`, as
/// swift-argument-parser's scripts do) for policy names, extension identifiers and bundles.
@Suite("Shell completion")
struct CompletionTests {
    /// The candidates the CLI offers for `argument` of `command` when the word being typed is `word`.
    static func candidates(_ command: [String], _ argument: String, typing word: String,
                           environment: [String: String]) async throws -> [String] {
        let output = try await Fixtures.run([TestPaths.cli, "---completion"] + command + ["--", argument, "0", String(word.utf8.count), word],
                                            environment: environment)
        #expect(output.status == 0, "\(command) \(argument): \(output.stderr)")
        return output.stdout.split(separator: "\n").map(String.init)
    }

    @Test("policy names for --policy and policy show|check, .yaml files when the word is a path")
    func policies() async throws {
        let directory = try TestPaths.makePolicyDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        for name in ["alpha", "beta", "brittle"] {
            try "version: 1\nextends: standard\n".write(to: directory.appendingPathComponent(name + ".yaml"), atomically: true, encoding: .utf8)
        }
        try "not a policy\n".write(to: directory.appendingPathComponent("notes.txt"), atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["EXTSANDBOX_POLICIES_DIR"] = directory.path

        for (command, argument) in [(["exec"], "--policy"), (["run"], "--policy"), (["test"], "--policy"),
                                    (["policy", "show"], "positional@0"), (["policy", "check"], "positional@0")] {
            #expect(try await Self.candidates(command, argument, typing: "", environment: environment) == ["alpha", "beta", "brittle"],
                    "\(command) \(argument)")
            #expect(try await Self.candidates(command, argument, typing: "b", environment: environment) == ["beta", "brittle"])
        }
        let files = try await Self.candidates(["exec"], "--policy", typing: directory.path + "/", environment: environment)
        #expect(files == ["alpha", "beta", "brittle"].map { directory.path + "/\($0).yaml" }, "\(files)")
    }

    @Test("installed extensions' identifiers for approve, revoke, enable, disable; bundles too for run and test")
    func extensions() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        try world.install("org.example.outside")
        try world.install("org.example.broken", manifest: "schema: 1\nidentifier: org.example.broken\n")
        // A choice saved for an extension since removed: revoke still completes it.
        #expect(try await world.cli(["approve", "org.example.outside"]).status == 0)
        try FileManager.default.moveItem(atPath: world.external + "/outside.appex", toPath: world.root + "/outside.appex")
        try world.install("org.example.other")

        let installed = ["org.example.bundled", "org.example.other", "org.example.outside"]
        for command in ["approve", "revoke", "enable", "disable"] {
            #expect(try await Self.candidates([command], "positional@0", typing: "", environment: world.environment) == installed, "\(command)")
            #expect(try await Self.candidates([command], "positional@0", typing: "org.example.o", environment: world.environment)
                    == ["org.example.other", "org.example.outside"])
        }
        for command in ["run", "test"] {
            #expect(try await Self.candidates([command], "positional@0", typing: "org.example.b", environment: world.environment)
                    == ["org.example.bundled"], "\(command)")
            // A path: the bundles (NAME.appex) and the directories to look in.
            let bundles = try await Self.candidates([command], "positional@0", typing: world.root + "/", environment: world.environment)
            #expect(bundles == ["extensions/", "host/", "outside.appex", "points/", "state/"].map { world.root + "/" + $0 }, "\(bundles)")
            let named = try await Self.candidates([command], "positional@0", typing: world.external + "/b", environment: world.environment)
            #expect(named == [world.external + "/broken.appex"], "\(named)")
        }
    }

    @Test("each shell's script calls the CLI back for these arguments")
    func scriptsCallBack() async throws {
        for shell in ["bash", "zsh", "fish"] {
            let script = try await Fixtures.run([TestPaths.cli, "--generate-completion-script", shell])
            #expect(script.status == 0)
            for call in ["---completion exec -- --policy", "---completion approve -- positional@0", "---completion run -- positional@0",
                         "---completion policy show -- positional@0"] {
                #expect(script.stdout.contains(call), "\(shell): no \(call)")
            }
        }
    }
}
