import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// `extsandbox list|approve|revoke|enable|disable`, run as the built binary.
@Suite("extsandbox list/approve")
struct CLITests {
    @Test func listShowsEachStateAndApproveEnableDisableChangeIt() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        let external = try world.install("org.example.outside")
        try world.install("org.example.broken", manifest: "schema: 1\nidentifier: org.example.broken\n")
        try world.install("org.example.private", point: ExtensionWorld.appOnlyPoint)
        try world.install("org.example.orphan", point: "org.example.nohost.point")

        let states = try await world.states()
        #expect(states["org.example.bundled"] == "enabled")
        #expect(states["org.example.outside"] == "unapproved")
        #expect(states["org.example.private"] == "invalid")
        #expect(states["org.example.orphan"] == "invalid")
        #expect(states[world.external + "/broken.appex"] == "invalid")

        let table = try await world.cli(["list"])
        #expect(table.status == 0)
        #expect(table.stdout.contains("org.example.outside"))
        #expect(table.stdout.contains("note: not approved yet"))
        #expect(!table.stdout.contains("org.example.orphan"))
        #expect(table.stdout.contains("3 invalid bundles not shown (extsandbox list --all)"))
        let all = try await world.cli(["list", "--all"])
        #expect(all.stdout.contains("why: \(world.external)/broken.appex/extension.yaml:1: missing 'point'"), "\(all.stdout)")
        #expect(all.stdout.contains("accepts only the host's own extensions (scope: application)"))
        #expect(all.stdout.contains("unknown point org.example.nohost.point: no installed host declares it"))

        let approve = try await world.cli(["approve", "org.example.outside"])
        #expect(approve.status == 0, "\(approve.stderr)")
        #expect(try await world.states()["org.example.outside"] == "enabled")
        #expect(try await world.cli(["disable", "org.example.bundled"]).status == 0)
        #expect(try await world.cli(["disable", "org.example.outside"]).status == 0)
        #expect(try await world.states()["org.example.bundled"] == "disabled")
        #expect(try await world.states()["org.example.outside"] == "disabled")
        #expect(try await world.cli(["enable", "org.example.outside"]).status == 0)
        #expect(try await world.states()["org.example.outside"] == "enabled")

        try world.replaceExecutable(of: external)
        let replaced = try await world.cli(["list", "--json"])
        #expect(replaced.stdout.contains("the executable changed since it was approved"))
        #expect(try await world.states()["org.example.outside"] == "unapproved")
        #expect(try await world.cli(["approve", "org.example.outside"]).status == 0)
        #expect(try await world.cli(["revoke", "org.example.outside"]).status == 0)
        #expect(try await world.states()["org.example.outside"] == "unapproved")

        let invalid = try await world.cli(["approve", "org.example.private"])
        #expect(invalid.status == 1)
        #expect(invalid.stderr.contains("org.example.private is invalid and cannot be approved"))
        let unknown = try await world.cli(["approve", "org.example.nothing"])
        #expect(unknown.status == 1)
        #expect(unknown.stderr.contains("no installed extension has the identifier org.example.nothing"))
    }

    /// `approve`, `revoke`, `enable` and `disable --json`: one object with the documented fields,
    /// `changed` false when the choice was so already.
    @Test func ownerChoicesPrintJSONWithStableFields() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        try world.install("org.example.outside")
        func object(_ arguments: [String]) async throws -> [String: Any] {
            let result = try await world.cli(arguments + ["--json"])
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
        }
        func digest(_ value: Any?) -> Bool {
            (value as? String).map { $0.hasPrefix("sha256:") && $0.count == 7 + 64 } ?? false
        }

        let approved = try await object(["approve", "org.example.outside"])
        #expect(approved["identifier"] as? String == "org.example.outside")
        #expect(approved["action"] as? String == "approve" && approved["changed"] as? Bool == true)
        #expect(approved["approval"] as? String == "pinned" && approved["disabled"] as? Bool == false)
        #expect(digest(approved["executable"]) && digest(approved["manifest"]), "\(approved)")
        #expect(try await object(["approve", "org.example.outside"])["changed"] as? Bool == false)
        let bundled = try await object(["approve", "org.example.bundled"])
        #expect(bundled["approval"] as? String == "implicit" && bundled["executable"] == nil, "\(bundled)")

        for (arguments, changed) in [(["disable", "org.example.outside"], true), (["disable", "org.example.outside"], false),
                                     (["enable", "org.example.outside"], true), (["enable", "org.example.outside"], false),
                                     (["revoke", "org.example.outside"], true), (["revoke", "org.example.outside"], false)] {
            let result = try await object(arguments)
            #expect(Set(result.keys) == ["identifier", "action", "changed", "scope"], "\(arguments): \(result)")
            #expect(result["scope"] as? String == "user")
            #expect(result["action"] as? String == arguments[0] && result["changed"] as? Bool == changed, "\(arguments): \(result)")
        }
        #expect(try await world.states()["org.example.outside"] == "unapproved")
    }

    @Test func aCorruptApprovalsFileFailsEveryCommandAndStaysAsItWas() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.outside")
        try world.write(world.stateFile, "extsandbox-approvals 1\napproved everything\n")
        for arguments in [["list"], ["approve", "org.example.outside"], ["disable", "org.example.outside"]] {
            let output = try await world.cli(arguments)
            #expect(output.status == 1)
            #expect(output.stderr.contains("\(world.stateFile):2: "), "\(arguments): \(output.stderr)")
        }
        #expect(try String(contentsOfFile: world.stateFile, encoding: .utf8) == "extsandbox-approvals 1\napproved everything\n")
    }

    /// A manifest's or a declaration's text cannot act on the owner's terminal: `list` shows its
    /// control characters escaped, so a version that would erase the row and draw a forged
    /// `enabled` one is plain text in the VERSION column; `--json` keeps the exact value.
    @Test func listShowsControlCharactersFromManifestsAndDeclarationsEscaped() async throws {
        let world = try ExtensionWorld()
        // YAML double-quoted escapes: ESC, CR, LF, CSI (U+009B), RIGHT-TO-LEFT OVERRIDE.
        let version = #"1\e[2K\e[1Gorg.example.forged  org.example.host.text  enabled\r\n\x9b2K\u202e"#
        func manifest(_ identifier: String, version: String = "1", executable: String = "bin/run") -> String {
            "schema: 1\nidentifier: \(identifier)\nname: x\nversion: \"\(version)\"\npoint: \(ExtensionWorld.openPoint)\nexecutable: \"\(executable)\"\n"
        }
        try world.install("org.example.sneaky", manifest: manifest("org.example.sneaky", version: version))
        try world.install("org.example.broken", manifest: manifest("org.example.broken", executable: #"bin/\e[2Krun"#))
        try world.write(world.points + "/other.appext", "schema: 1\nhost: \"org.\\e[2Kevil\"\npoints: []\n")

        let table = try await world.cli(["list", "--all"])
        #expect(table.status == 0, "\(table.stderr)")
        for output in [table.stdout, table.stderr] {
            #expect(!output.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\r" || $0 == "\u{9B}" || $0 == "\u{202E}" }, "\(output)")
        }
        #expect(table.stdout.contains(#"1\e[2K\e[1Gorg.example.forged  org.example.host.text  enabled\r\n\x9b2K\u{202e}"#),
                "\(table.stdout)")
        // The header, the sneaky row, its note, the broken row and its why: no forged line.
        #expect(table.stdout.split(separator: "\n").count == 5, "\(table.stdout)")
        #expect(table.stdout.contains(#"executable bin/\e[2Krun: "#), "\(table.stdout)")
        #expect(table.stderr.contains(#"host identifier 'org.\e[2Kevil' is not a reverse-DNS name"#), "\(table.stderr)")

        let json = try await world.cli(["list", "--json"])
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
        let row = try #require(rows.first { $0["identifier"] as? String == "org.example.sneaky" })
        #expect(row["version"] as? String == "1\u{1B}[2K\u{1B}[1Gorg.example.forged  org.example.host.text  enabled\r\n\u{9B}2K\u{202E}")
    }

    /// Writers take the lock for the whole read-modify-write: none loses another's change.
    @Test func concurrentApprovalsAreAllKept() async throws {
        let world = try ExtensionWorld()
        let identifiers = (0..<8).map { "org.example.ext\($0)" }
        for identifier in identifiers { try world.install(identifier) }
        // All started before any is waited for: they run at once.
        var running: [StartedProcess] = []
        for identifier in identifiers {
            running.append(try world.start(["approve", identifier]))
            running.append(try world.start(["disable", identifier]))
        }
        for started in running {
            let output = await started.output()
            #expect(output.status == 0, "\(output.stderr)")
        }
        let state = try ApprovalStore(path: world.stateFile).load()
        #expect(Set(state.approvals.keys) == Set(identifiers))
        #expect(state.disabled == Set(identifiers))
    }
}
