import Foundation
import Glibc
import Testing
import TestSupport

/// The CLI's output conventions (issue 13, "Conventions"), on the built binary: aligned tables,
/// colour only on a terminal and never with NO_COLOR, `--json` on every listing, a progress line
/// only on a terminal, and errors that name the thing and say what to do.
@Suite("CLI output conventions")
struct OutputConventionsTests {
    /// A world with extensions of different name lengths, one of them invalid (a point that
    /// accepts only its host's own extensions).
    static func populatedWorld() throws -> ExtensionWorld {
        let world = try ExtensionWorld()
        try world.install("org.example.a", in: world.hostBundle + "/Extensions")
        try world.install("org.example.much-longer-identifier")
        try world.install("org.example.private", point: ExtensionWorld.appOnlyPoint)   // invalid: outside its host
        return world
    }

    /// The start of each column in a table's header line (upper-case words separated by 2+ spaces).
    static func columnStarts(_ header: String) -> [Int] {
        var starts: [Int] = []
        let characters = Array(header)
        for index in characters.indices where characters[index] != " " && (index == 0 || characters[index - 1] == " ") {
            starts.append(index)
        }
        return starts
    }

    /// Whether every row of `lines` (the header first; indented note lines skipped) has a cell
    /// beginning at each column start of the header, with a space before it.
    static func isAligned(_ lines: [String], columns: Int) -> Bool {
        guard let header = lines.first else { return false }
        let starts = columnStarts(header)
        guard starts.count == columns else { return false }
        for line in lines.dropFirst() where !line.hasPrefix("    ") {
            let characters = Array(line)
            for start in starts.dropFirst() {
                guard start < characters.count, characters[start] != " ", characters[start - 1] == " ",
                      characters[start - 2] == " " else { return false }
            }
        }
        return true
    }

    @Test("extsandbox list prints an aligned table")
    func listTableIsAligned() async throws {
        let world = try Self.populatedWorld()
        let output = try await world.cli(["list", "--all"])
        #expect(output.status == 0, "\(output.stderr)")
        let lines = output.stdout.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("No ") }
        #expect(lines.first?.hasPrefix("IDENTIFIER") == true, "\(output.stdout)")
        #expect(lines.filter { !$0.hasPrefix("    ") }.count == 4, "\(output.stdout)")   // header and three rows
        #expect(Self.isAligned(lines, columns: 8), "\(output.stdout)")
        #expect(!output.stdout.contains("\u{1B}"), "escape codes on a pipe: \(output.stdout)")
        #expect(!lines.contains { $0.hasSuffix(" ") }, "trailing spaces: \(output.stdout)")
    }

    @Test("extsandbox policy list prints the policies as an aligned table")
    func policyListTableIsAligned() async throws {
        let output = try await Fixtures.run([TestPaths.cli, "policy", "list"], environment: TestPaths.environmentWithPolicies())
        #expect(output.status == 0, "\(output.stderr)")
        let table = output.stdout.components(separatedBy: "\n\n").last ?? ""
        let lines = table.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("NAME") == true, "\(output.stdout)")
        #expect(Self.isAligned(lines, columns: 2), "\(output.stdout)")
        for level in ["standard", "restricted", "hardened"] {
            #expect(lines.contains { $0.hasPrefix(level + " ") && $0.hasSuffix("/\(level).yaml") }, "\(output.stdout)")
        }
    }

    /// `arguments` run on a terminal (TERM=xterm unless `environment` says otherwise): what the
    /// terminal showed (stdout and stderr together) and the exit status.
    static func onTerminal(_ arguments: [String], environment extra: [String: String] = [:],
                           base: [String: String] = TestPaths.environmentWithPolicies()) async throws -> (output: String, status: Int?) {
        var environment = base
        environment["TERM"] = "xterm"
        environment["NO_COLOR"] = nil
        for (key, value) in extra { environment[key] = value }
        let spec: [String: Any] = ["argv": [TestPaths.cli] + arguments, "steps": [], "stdin": "null"]
        environment["XSB_PTY_SPEC"] = String(decoding: try JSONSerialization.data(withJSONObject: spec), as: UTF8.self)
        let result = try await Fixtures.run([TerminalHarness.python, "-c", TerminalHarness.script], environment: environment)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
                                  "harness: \(result.stdout) \(result.stderr)")
        return (object["output"] as? String ?? "", object["status"] as? Int)
    }

    @Test("colour on a terminal only, and never with NO_COLOR set")
    func colourOnlyOnATerminalWithoutNoColor() async throws {
        let world = try Self.populatedWorld()
        let coloured = try await Self.onTerminal(["list", "--all"], base: world.environment)
        #expect(coloured.status == 0, "\(coloured.output)")
        #expect(coloured.output.contains("\u{1B}[31minvalid\u{1B}[0m"), "no colour on a terminal: \(coloured.output.debugDescription)")

        let noColor = try await Self.onTerminal(["list", "--all"], environment: ["NO_COLOR": "1"], base: world.environment)
        #expect(noColor.status == 0, "\(noColor.output)")
        #expect(noColor.output.contains("invalid"), "\(noColor.output)")
        #expect(!noColor.output.contains("\u{1B}"), "escape codes despite NO_COLOR: \(noColor.output.debugDescription)")

        let dumb = try await Self.onTerminal(["policy", "check", "standard"], environment: ["TERM": "dumb"])
        #expect(!dumb.output.contains("\u{1B}"), "escape codes on TERM=dumb: \(dumb.output.debugDescription)")
        let check = try await Self.onTerminal(["policy", "check", "standard"])
        #expect(check.output.contains("\u{1B}[32mok\u{1B}[0m"), "\(check.output.debugDescription)")
        let piped = try await Fixtures.run([TestPaths.cli, "policy", "check", "standard"], environment: TestPaths.environmentWithPolicies())
        #expect(piped.status == 0 && !piped.stdout.contains("\u{1B}") && !piped.stderr.contains("\u{1B}"), "\(piped)")
    }

    @Test("a progress line only on a terminal, on stderr, erased when the work ends")
    func progressOnlyOnATerminal() async throws {
        let world = try Self.populatedWorld()
        // Work that takes a while: hashing a 256 MiB executable (sparse, so it costs no disk).
        let bundle = try world.install("org.example.big")
        let executable = bundle + "/bin/run"
        let fd = open(executable, O_WRONLY | O_APPEND)
        #expect(fd >= 0 && ftruncate(fd, 256 << 20) == 0)
        close(fd)
        var environment = world.environment
        environment["EXTSANDBOX_PROGRESS_AFTER_MS"] = "0"
        let shown = try await Self.onTerminal(["approve", "org.example.big"], base: environment)
        #expect(shown.status == 0, "\(shown.output)")
        #expect(shown.output.contains("hashing the executable and manifest of org.example.big"), "\(shown.output.debugDescription)")
        #expect(shown.output.contains("\r\u{1B}[2K"), "the progress line is not erased: \(shown.output.debugDescription)")

        let piped = try await Fixtures.run([TestPaths.cli, "approve", "org.example.big"], environment: environment)
        #expect(piped.status == 0, "\(piped.stderr)")
        #expect(piped.stderr.isEmpty, "progress on a pipe: \(piped.stderr.debugDescription)")
        #expect(piped.stdout.hasPrefix("approved org.example.big"), "\(piped.stdout)")
    }

    @Test("--json on every listing command parses back with the documented fields")
    func jsonParsesBack() async throws {
        let world = try Self.populatedWorld()
        let list = try await world.cli(["list", "--all", "--json"])
        #expect(list.status == 0, "\(list.stderr)")
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
        #expect(rows.count == 3)
        let fields: Set<String> = ["identifier", "name", "version", "point", "host", "state", "reason", "level", "origin", "path",
                                    "signer", "signature", "decidedBy"]
        for row in rows { #expect(Set(row.keys).isSubset(of: fields), "\(row.keys)") }
        let bundled = try #require(rows.first { $0["identifier"] as? String == "org.example.a" })
        #expect(bundled["state"] as? String == "enabled" && bundled["origin"] as? String == "bundled", "\(bundled)")
        #expect(rows.contains { $0["state"] as? String == "invalid" && $0["reason"] is String }, "\(rows)")

        let environment = TestPaths.environmentWithPolicies()
        let policies = try await Fixtures.run([TestPaths.cli, "policy", "list", "--json"], environment: environment)
        #expect(policies.status == 0, "\(policies.stderr)")
        let listing = try #require(try JSONSerialization.jsonObject(with: Data(policies.stdout.utf8)) as? [String: Any])
        let directories = try #require(listing["directories"] as? [[String: Any]])
        #expect(directories.first?["path"] as? String == TestPaths.policiesDirectory, "\(directories)")
        #expect(directories.first?["role"] as? String == "install" && directories.first?["status"] as? String == "present")
        let entries = try #require(listing["policies"] as? [[String: Any]])
        let standard = try #require(entries.first { $0["name"] as? String == "standard" })
        #expect(standard["file"] as? String == TestPaths.standardPolicyPath, "\(standard)")
        #expect(standard["broken"] as? Bool == false && (standard["description"] as? String)?.isEmpty == false, "\(standard)")
        #expect(standard["shadowed"] as? [String] == [], "\(standard)")

        let dir = try TestPaths.makePolicyDirectory("json-check").path
        try "version: 1\nseccomp:\n  default: kill\n  allow: [\"@default\", opnat]\n".write(toFile: dir + "/bad.yaml", atomically: true, encoding: .utf8)
        let check = try await Fixtures.run([TestPaths.cli, "policy", "check", "--json", "standard", dir + "/bad.yaml", "nosuch"], environment: environment)
        #expect(check.status == 1)
        let results = try #require(try JSONSerialization.jsonObject(with: Data(check.stdout.utf8)) as? [[String: Any]], "\(check.stdout)")
        #expect(results.map { $0["policy"] as? String } == ["standard", dir + "/bad.yaml", "nosuch"])
        #expect(results.map { $0["ok"] as? Bool } == [true, false, false])
        #expect((results[0]["instructions"] as? Int ?? 0) > 0 && results[0]["defaultAction"] as? String == "kill", "\(results[0])")
        let problem = try #require((results[1]["problems"] as? [[String: Any]])?.first)
        #expect(problem["file"] as? String == dir + "/bad.yaml" && problem["line"] as? Int == 4 && problem["column"] as? Int == 23, "\(problem)")
        #expect((problem["message"] as? String)?.contains("did you mean \"openat\"") == true, "\(problem)")
        #expect(results[2]["file"] == nil, "\(results[2])")
    }

    /// Runs `arguments` and returns its stderr after checking it failed with `status`.
    static func failure(_ arguments: [String], status: Int32, environment: [String: String] = TestPaths.environmentWithPolicies(),
                        sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
        let output = try await Fixtures.run([TestPaths.cli] + arguments, environment: environment)
        #expect(output.status == status, "\(arguments): \(output.stdout) \(output.stderr)", sourceLocation: sourceLocation)
        return output.stderr
    }

    @Test("each bad input of exec names the thing and says what to do")
    func execErrorsAreActionable() async throws {
        let missing = try await Self.failure(["exec", "--policy", "nosuch", "--", "/bin/true"], status: 125)
        #expect(missing.contains("no policy named \"nosuch\""), "\(missing)")
        #expect(missing.contains("hint: `extsandbox policy list` shows the policies"), "\(missing)")

        let file = try await Self.failure(["exec", "--policy", "/nonexistent/mine.yaml", "--", "/bin/true"], status: 125)
        #expect(file.contains("/nonexistent/mine.yaml"), "\(file)")
        #expect(file.contains("hint: check the path"), "\(file)")

        let dir = try TestPaths.makePolicyDirectory("writable")
        chmod(dir.path, 0o777)
        try FileManager.default.copyItem(atPath: TestPaths.standardPolicyPath, toPath: dir.path + "/standard.yaml")
        var untrusted = TestPaths.environmentWithPolicies()
        untrusted["EXTSANDBOX_POLICIES_DIR"] = dir.path
        let refused = try await Self.failure(["exec", "--", "/bin/true"], status: 125, environment: untrusted)
        #expect(refused.contains("refused: \(dir.path) is writable by others"), "\(refused)")
        #expect(refused.contains("hint: make the directory named above") && refused.contains("chmod go-w"), "\(refused)")
        let listed = try await Fixtures.run([TestPaths.cli, "policy", "list"], environment: untrusted)
        #expect(listed.status == 1 && listed.stdout.contains("REFUSED"), "\(listed)")

        let broken = try TestPaths.makePolicyDirectory("broken")
        try "version: 1\nseccomp:\n  default: kill\n  allow: [opnat]\n".write(toFile: broken.path + "/b.yaml", atomically: true, encoding: .utf8)
        let parse = try await Self.failure(["exec", "--policy", broken.path + "/b.yaml", "--", "/bin/true"], status: 125)
        #expect(parse.contains(broken.path + "/b.yaml:4"), "\(parse)")
        #expect(parse.contains("hint: `extsandbox policy check \(broken.path)/b.yaml` lists every problem"), "\(parse)")

        let program = try await Self.failure(["exec", "--", "no-such-program-xsb"], status: 127)
        #expect(program.contains("no-such-program-xsb: command not found") && program.contains("hint: give its path"), "\(program)")

        let bind = try await Self.failure(["exec", "--ro-bind", "/nonexistent-xsb", "--", "/bin/true"], status: 125)
        #expect(bind.contains("bind mount failed") && bind.contains("/nonexistent-xsb"), "\(bind)")
        #expect(bind.contains("hint: check that every --ro-bind/--bind source"), "\(bind)")

        let show = try await Self.failure(["policy", "show", "nosuch"], status: 1)
        #expect(show.contains("no policy named \"nosuch\"") && show.contains("hint: "), "\(show)")
    }

    @Test("each bad input of list/approve/revoke/enable/disable names the thing and says what to do")
    func extensionErrorsAreActionable() async throws {
        let world = try Self.populatedWorld()
        for command in ["approve", "revoke", "enable", "disable"] {
            let unknown = try await world.cli([command, "org.example.nothing"])
            #expect(unknown.status == 1)
            #expect(unknown.stderr.contains("no installed extension has the identifier org.example.nothing"), "\(command): \(unknown.stderr)")
            #expect(unknown.stderr.contains("hint: `extsandbox list --all` shows every installed extension"), "\(command): \(unknown.stderr)")
        }
        let invalid = try await world.cli(["approve", "org.example.private"])
        #expect(invalid.status == 1)
        #expect(invalid.stderr.contains("org.example.private is invalid and cannot be approved: \(world.external)/private.appex"),
                "\(invalid.stderr)")
        #expect(invalid.stderr.contains("hint: fix the file (docs/extensions.md"), "\(invalid.stderr)")

        try world.write(world.points + "/other.appext", "schema: 1\nhost: [not a name\n")
        let declaration = try await world.cli(["list"])
        #expect(declaration.status == 0, "\(declaration.stderr)")
        #expect(declaration.stderr.contains("ignoring a point declaration: \(world.points)/other.appext"), "\(declaration.stderr)")
        #expect(declaration.stderr.contains("hint: fix the file (docs/extensions.md"), "\(declaration.stderr)")

        try world.write(world.stateFile, "extsandbox-approvals 1\nnonsense here\n")
        let state = try await world.cli(["list"])
        #expect(state.status == 1)
        #expect(state.stderr.contains("\(world.stateFile):2: "), "\(state.stderr)")
        #expect(state.stderr.contains("hint: fix or delete that line of the approvals file"), "\(state.stderr)")
    }

    /// With standard error a regular file (`2>file`), the program's lines and the CLI's own (the
    /// --audit warning before the run, the audit's summary after it) all end up in it: the
    /// program writes through a description of its own, and the CLI's lines go through that same
    /// description while it runs, so neither overwrites the other.
    @Test("with stderr a regular file, neither the program's lines nor the CLI's are lost")
    func stderrFileKeepsEveryLine() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-stderr-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("err").path
        let command = "'\(TestPaths.cli)' exec --audit -- /bin/sh -c 'echo program-line >&2' 2>'\(file)'"
        let result = try await Fixtures.run(["/bin/sh", "-c", command])
        #expect(result.status == 0, "\(result.stderr)")
        let text = try String(contentsOfFile: file, encoding: .utf8)
        #expect(text.contains("warning: --audit"), "\(text)")
        #expect(text.contains("program-line\n"), "\(text)")
        #expect(text.contains("audit: the policy"), "\(text)")
        #expect(text.components(separatedBy: "\n").filter { $0.contains("program-line") } == ["program-line"], "\(text)")
    }
}
