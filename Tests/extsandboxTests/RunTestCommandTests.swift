@testable import SandboxExec
import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// `extsandbox run` and `extsandbox test`, run as the built binary against real sandboxed
/// extensions: the SDK's echo fixture (statically linked, so it runs under `hardened`) and the
/// Python fixture that breaks the protocol one way per identifier (under `standard`).
@Suite("extsandbox run/test")
struct RunTestCommandTests {
    static let echo = TestPaths.echoExtension
    static let nonconforming = TestPaths.fixturesDirectory + "/nonconforming_extension.py"

    /// A world with a development directory of bundles (never installed) beside the locations.
    struct Bundles {
        let world: ExtensionWorld
        var development: String { world.root + "/dev" }

        init() throws {
            world = try ExtensionWorld()
            try FileManager.default.createDirectory(atPath: world.root + "/dev", withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o755])
        }

        /// The echo fixture as a bundle in the development directory.
        func echo(_ identifier: String = "org.example.echo") throws -> String {
            try world.install(identifier, in: development, executableSource: RunTestCommandTests.echo)
        }

        /// The Python fixture whose behaviour is the identifier's last part.
        func nonconforming(_ mode: String) throws -> String {
            try world.install("org.example.\(mode)", in: development, executableSource: RunTestCommandTests.nonconforming)
        }

        /// `NAME.appex` in the development directory, as org.example.conforming: its executable
        /// runs the Python fixture from its resources (`impl.py`, at /extension in the sandbox),
        /// so two such bundles have the same manifest and executable, and differ only there.
        /// With `reply`, its `impl.py` answers every request with that text instead of echoing it.
        func resourceDriven(_ name: String, reply: String? = nil) throws -> String {
            let bundle = development + "/\(name).appex"
            try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            try world.write(bundle + "/extension.yaml", """
                schema: 1
                identifier: org.example.conforming
                name: resource-driven
                version: "1.0"
                point: \(ExtensionWorld.openPoint)
                executable: bin/run
                resources: [impl.py]
                """)
            try world.write(bundle + "/bin/run", "#!/usr/bin/python3\nexec(open('/extension/impl.py').read())\n", mode: 0o755)
            var implementation = try String(contentsOfFile: RunTestCommandTests.nonconforming, encoding: .utf8)
            if let reply {
                let echo = "sock.sendall(frame(REPLY, id, payload))"
                #expect(implementation.contains(echo))
                implementation = implementation.replacingOccurrences(of: echo, with: "sock.sendall(frame(REPLY, id, b\"\(reply)\"))")
            }
            try world.write(bundle + "/impl.py", implementation)
            return bundle
        }

        /// `test --json` of the Python fixture in `mode` under `standard` (2 s for each answer),
        /// which must fail: its report.
        func failingReport(_ mode: String) async throws -> [String: Any] {
            let output = try await run(["test", try nonconforming(mode), "--policy", "standard", "--timeout", "2", "--json"])
            #expect(output.status == 1, "\(output.stdout)\(output.stderr)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
            #expect(report["passed"] as? Bool == false)
            return report
        }

        /// Runs the built CLI with the world's locations and the checkout's policies.
        func run(_ arguments: [String], stdin: String? = nil) async throws -> Fixtures.Output {
            try await Fixtures.run([TestPaths.cli] + arguments, environment: TestPaths.environmentWithPolicies(world.environment),
                                   standardInput: stdin)
        }
    }

    @Test func runSendPrintsEachReplyAndExitsWithWhatHappened() async throws {
        let bundles = try Bundles()
        let bundle = try bundles.echo()
        let replies = try await bundles.run(["run", bundle, "--policy", "hardened", "--send", "hello", "--send", "memfd", "--send", "world"])
        #expect(replies.status == 0, "\(replies.stderr)")
        #expect(replies.stdout == "hello\n-1\nworld\n")

        // An error answer: reported, the rest still sent, status 1.
        let failed = try await bundles.run(["run", bundle, "--policy", "hardened", "--send", "fail", "--send", "after"])
        #expect(failed.status == 1)
        #expect(failed.stdout == "after\n")
        #expect(failed.stderr.contains("request 'fail': the extension answered error 123: asked to fail"), "\(failed.stderr)")

        // A crash ends the conversation: status 1 with the reason, nothing more sent.
        let crashed = try await bundles.run(["run", bundle, "--policy", "hardened", "--send", "crash", "--send", "after"])
        #expect(crashed.status == 1)
        #expect(crashed.stdout.isEmpty)
        #expect(crashed.stderr.contains("interrupted: killed by signal 11"), "\(crashed.stderr)")

        // A forbidden call under hardened: killed, named.
        let killed = try await bundles.run(["run", bundle, "--policy", "hardened", "--send", "socket"])
        #expect(killed.status == 1)
        #expect(killed.stderr.contains("seccomp violation: socket"), "\(killed.stderr)")

        // The point is declared by no installed host: its level is unknown without --policy.
        let elsewhere = try bundles.world.install("org.example.elsewhere", point: "org.example.nohost.point", in: bundles.development,
                                                  executableSource: Self.echo)
        let undeclared = try await bundles.run(["run", elsewhere + "/", "--send", "x"])
        #expect(undeclared.status == 125)
        #expect(undeclared.stderr.contains("pass --policy NAME"), "\(undeclared.stderr)")
        // With --policy it runs (a bundle by path needs no approval), the level given.
        #expect(try await bundles.run(["run", elsewhere, "--policy", "hardened", "--send", "x"]).stdout == "x\n")
        #expect(try await bundles.run(["run", "--send", "x"]).status == 64)  // usage
    }

    /// `run --json-status-fd 3`: one line of JSON on descriptor 3 when the run ends, with the
    /// fields of exec's; the run's result and the line.
    @Test func runWritesHowTheExtensionEndedToTheStatusDescriptor() async throws {
        let bundles = try Bundles()
        let bundle = try bundles.echo()
        let file = bundles.world.root + "/status.json"
        func run(_ arguments: [String]) async throws -> (Fixtures.Output, [String: Any]) {
            let words = ([TestPaths.cli, "run"] + arguments + ["--json-status-fd", "3"]).map { "'\($0)'" }.joined(separator: " ")
            let output = try await Fixtures.run(["/bin/sh", "-c", "exec \(words) 3>'\(file)'"],
                                                environment: TestPaths.environmentWithPolicies(bundles.world.environment))
            let line = try String(contentsOfFile: file, encoding: .utf8)
            #expect(line.hasSuffix("}\n") && line.filter { $0 == "\n" }.count == 1, "one line: \(line)")
            return (output, try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)"))
        }

        let (replied, ended) = try await run([bundle, "--policy", "hardened", "--send", "hello"])
        #expect(replied.status == 0 && replied.stdout == "hello\n", "\(replied.stderr)")
        #expect(ended["end"] as? String == "exited" && ended["exitCode"] as? Int == 0 && ended["status"] as? Int == 0, "\(ended)")
        #expect((ended["pid"] as? Int ?? 0) > 0 && (ended["pidInside"] as? Int ?? 0) > 0, "\(ended)")

        let (killed, violation) = try await run([bundle, "--policy", "hardened", "--send", "socket"])
        #expect(killed.status == 1)
        #expect(violation["end"] as? String == "seccomp-violation" && violation["violation"] as? String == "socket"
                && violation["signal"] as? Int == Int(SIGSYS) && violation["status"] as? Int == 1, "\(violation)")

        // No --policy and no host declaring its point: nothing launched.
        let elsewhere = try bundles.world.install("org.example.elsewhere", point: "org.example.nohost.point", in: bundles.development,
                                                  executableSource: Self.echo)
        let (refused, notStarted) = try await run([elsewhere, "--send", "x"])
        #expect(refused.status == 125)
        #expect(notStarted["end"] as? String == "not-started" && notStarted["status"] as? Int == 125 && notStarted["pid"] == nil, "\(notStarted)")

        let usage = try await bundles.run(["run", bundle, "--send", "x", "--json-status-fd", "1"])
        #expect(usage.status == 64 && usage.stderr.contains("--json-status-fd expects an open file descriptor above 2"), "\(usage.stderr)")
    }

    /// A bundle given by path runs from that bundle only: another bundle in its directory (which
    /// others may write, like /tmp) with the same identifier, manifest and executable but its own
    /// resources is never run in its place, by `run` or by `test`.
    @Test func aBundleByPathRunsOnlyFromTheBundleNamed() async throws {
        let bundles = try Bundles()
        let mine = try bundles.resourceDriven("Mine")
        let other = try bundles.resourceDriven("A", reply: "from A")  // found first in the directory
        let refusal = "\(mine) cannot run: \(other), in the same directory, has its identifier org.example.conforming"

        let run = try await bundles.run(["run", mine, "--policy", "standard", "--send", "hello"])
        #expect(run.status == 125, "\(run.stdout)\(run.stderr)")
        #expect(!run.stdout.contains("from A"), "\(run.stdout)")
        #expect(run.stderr.contains(refusal), "\(run.stderr)")
        let test = try await bundles.run(["test", mine, "--policy", "standard"])
        #expect(test.status == 1, "\(test.stdout)\(test.stderr)")
        #expect(!test.stdout.contains("from A"), "\(test.stdout)")
        #expect(test.stdout.contains("  FAIL  manifest"), "\(test.stdout)")
        #expect(test.stdout.contains(refusal), "\(test.stdout)")

        // Found after the named bundle, the other one changes nothing: the named bundle runs.
        #expect(rename(other, bundles.development + "/Z.appex") == 0)
        let ran = try await bundles.run(["run", mine, "--policy", "standard", "--send", "hello"])
        #expect(ran.status == 0, "\(ran.stderr)")
        #expect(ran.stdout == "hello\n")
        let tested = try await bundles.run(["test", mine, "--policy", "standard"])
        #expect(tested.status == 0, "\(tested.stdout)\(tested.stderr)")
        #expect(tested.stdout.contains("  PASS  round trip"), "\(tested.stdout)")
        #expect(!tested.stdout.contains("from A"), "\(tested.stdout)")
    }

    /// Before: the bundle found first was compared with the one named as strings, so a sibling
    /// whose name is another spelling of its name (the Kelvin sign for "K") was taken for it, and
    /// the refusal did not say which bundle discovery takes instead.
    @Test func aSiblingSpelledAlikeIsNamedAsTheBundleDiscoveredInstead() async throws {
        let bundles = try Bundles()
        let paths = [try bundles.resourceDriven("Key"), try bundles.resourceDriven("\u{212A}ey", reply: "from Kelvin")]
        // The two names sort as one: which one discovery finds first is the directory's order.
        let locations = ExtensionLocations(hostBundle: nil, external: [bundles.development], pointDirectories: [],
                                           stateFile: bundles.world.stateFile)
        let first = try #require(ExtensionCatalog.scan(locations, bundledPoints: nil).first { (try? $0.bundle.get()) != nil }?.path)
        let mine = try #require(paths.first { !$0.utf8.elementsEqual(first.utf8) })
        let refusal = "\(mine) cannot run: \(first), in the same directory, has its identifier org.example.conforming"
        let run = try await bundles.run(["run", mine, "--policy", "standard", "--send", "hello"])
        #expect(run.status == 125, "\(run.stdout)\(run.stderr)")
        #expect(Array(run.stderr.utf8).firstRange(of: Array(refusal.utf8)) != nil, "\(run.stderr)")
    }

    /// What a manifest says, and what the extension answers, reach `run`'s and `test`'s output
    /// with nothing a terminal would act on: control characters escaped, or a reply shown in hex.
    @Test func runAndTestShowControlCharactersEscaped() async throws {
        let bundles = try Bundles()
        func manifest(_ identifier: String, version: String = "1", executable: String = "bin/run") -> String {
            "schema: 1\nidentifier: \(identifier)\nname: x\nversion: \"\(version)\"\npoint: \(ExtensionWorld.openPoint)\nexecutable: \"\(executable)\"\n"
        }
        let bundle = try bundles.world.install("org.example.echo", in: bundles.development,
                                               manifest: manifest("org.example.echo", version: #"1\e[2K\rforged"#), executableSource: Self.echo)
        let broken = try bundles.world.install("org.example.broken", in: bundles.development,
                                               manifest: manifest("org.example.broken", executable: #"bin/\e]0;title\a"#))
        func expectNothingForATerminal(_ output: Fixtures.Output) {
            for text in [output.stdout, output.stderr] {
                #expect(!text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" || (0x7F...0x9F).contains($0.value) }, "\(text)")
            }
        }

        let tested = try await bundles.run(["test", bundle, "--policy", "hardened"])
        #expect(tested.status == 0, "\(tested.stdout)\(tested.stderr)")
        #expect(tested.stdout.contains(#"org.example.echo 1\e[2K\rforged for point"#), "\(tested.stdout)")
        expectNothingForATerminal(tested)
        // A C1 control (CSI, U+009B) in a reply: shown as bytes, as other controls are.
        let replied = try await bundles.run(["run", bundle, "--policy", "hardened", "--send", "a\u{9B}2Kb"])
        #expect(replied.status == 0, "\(replied.stderr)")
        #expect(replied.stdout == "<6 bytes: 61 c2 9b 32 4b 62>\n")
        expectNothingForATerminal(replied)

        let refused = try await bundles.run(["run", broken, "--policy", "hardened", "--send", "x"])
        #expect(refused.status == 125)
        #expect(refused.stderr.contains(#"executable bin/\e]0;title\x07: "#), "\(refused.stderr)")
        expectNothingForATerminal(refused)
        let failed = try await bundles.run(["test", broken, "--policy", "hardened"])
        #expect(failed.status == 1)
        #expect(failed.stdout.contains(#"executable bin/\e]0;title\x07: "#), "\(failed.stdout)")
        expectNothingForATerminal(failed)
    }

    /// The host API keeps a broken policy's PolicyError (ExtensionError.policyFailed): `run`
    /// names its file and line, and gives the policy's advice.
    @Test func runWithABrokenPolicyNamesItsLineAndAdvises() async throws {
        let bundles = try Bundles()
        let bundle = try bundles.echo()
        let policy = bundles.development + "/broken.yaml"
        // The seccomp section has no `default:` (line 3 is its first entry).
        #expect(FileManager.default.createFile(atPath: policy, contents: Data("version: 1\nseccomp:\n  allow: [\"@default\"]\n".utf8)))
        let result = try await bundles.run(["run", bundle, "--policy", policy, "--send", "x"])
        #expect(result.status == 125)
        #expect(result.stderr.contains("could not be launched: policy \(policy):3:"), "\(result.stderr)")
        #expect(result.stderr.contains("hint: `extsandbox policy check \(policy)` lists every problem"), "\(result.stderr)")
    }

    @Test func runByIdentifierRunsOnlyWhatItsHostWouldRun() async throws {
        let bundles = try Bundles()
        let world = bundles.world
        try world.install("org.example.echo", executableSource: Self.echo)
        let unapproved = try await bundles.run(["run", "org.example.echo", "--send", "hi"])
        #expect(unapproved.status == 125)
        #expect(unapproved.stderr.contains("org.example.echo is not approved (not approved yet)"), "\(unapproved.stderr)")
        #expect(unapproved.stderr.contains("extsandbox approve org.example.echo"))

        #expect(try await world.cli(["approve", "org.example.echo"]).status == 0)
        let approved = try await bundles.run(["run", "org.example.echo", "--send", "hi", "--verbose"])
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(approved.stdout == "hi\n")
        // The point's level as its host declares it (standard), and the launch events.
        #expect(approved.stderr.contains("in the 'standard' sandbox (the level of point \(ExtensionWorld.openPoint))"), "\(approved.stderr)")
        #expect(approved.stderr.contains("org.example.echo: launched (sandbox init pid "))

        #expect(try await world.cli(["disable", "org.example.echo"]).status == 0)
        let disabled = try await bundles.run(["run", "org.example.echo", "--send", "hi"])
        #expect(disabled.status == 125)
        #expect(disabled.stderr.contains("extsandbox enable org.example.echo"), "\(disabled.stderr)")

        let unknown = try await bundles.run(["run", "org.example.nothing", "--send", "hi"])
        #expect(unknown.status == 125)
        #expect(unknown.stderr.contains("no installed extension has the identifier org.example.nothing"))
    }

    @Test func runInteractivePrintsRepliesEventsAndTheExtensionsOwnMessages() async throws {
        let bundles = try Bundles()
        let bundle = try bundles.echo()
        let session = try await bundles.run(["run", bundle, "--policy", "hardened"],
                                      stdin: "hello\nask-host hi\ntell-host yo\n:oneway ping\nfail\n::colon\n")
        #expect(session.status == 0, "\(session.stderr)")
        let lines = session.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("event: launched (sandbox init pid ") == true, "\(lines)")
        for expected in ["reply: hello", "extension request: hi (answered with error 2, unknown request)", "reply: host error 2",
                         "extension one-way: yo", "reply: told", "sent one-way: ping",
                         "failed: the extension answered error 123: asked to fail", "reply: :colon"] {
            #expect(lines.contains(expected), "\(expected) in \(lines)")
        }
        #expect(session.stderr.contains("org.example.echo ended: exited with status 0"), "\(session.stderr)")
    }

    /// The interactive session holds its connection from the start: a user who takes longer
    /// than the host's suspend delay to type sees no suspension they did not cause; one they
    /// cause (:close) is shown, and the next request resumes the extension.
    @Test func runInteractiveIsNotSuspendedWhileTheUserTypes() async throws {
        let bundles = try Bundles()
        let bundle = try bundles.echo()
        let script = "(sleep 1; echo hello; echo :close; sleep 1; echo again) | '\(TestPaths.cli)' run '\(bundle)' --policy hardened"
        let session = try await Fixtures.run(["/bin/sh", "-c", script],
                                             environment: TestPaths.environmentWithPolicies(bundles.world.environment))
        #expect(session.status == 0, "\(session.stderr)")
        let lines = session.stdout.split(separator: "\n").map(String.init)
        let events = lines.filter { $0.hasPrefix("event: ") || $0.hasPrefix("reply: ") || $0 == "closed the connection" }
        #expect(events.count == 6, "\(lines)")
        #expect(events.first?.hasPrefix("event: launched") == true, "\(lines)")
        #expect(Array(events.dropFirst()) == ["reply: hello", "closed the connection", "event: suspended (no connection open)",
                                              "event: resumed", "reply: again"], "\(lines)")
    }

    /// SIGINT (the terminal's Ctrl-C) and SIGTERM: the extension is ended, nothing keeps running.
    @Test(arguments: [SIGINT, SIGTERM])
    func aSignalEndsTheRunAndLeavesNothingRunning(signal: Int32) async throws {
        let bundles = try Bundles()
        let bundle = try bundles.echo()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestPaths.cli)
        process.arguments = ["run", bundle, "--policy", "hardened"]
        let scratch = bundles.world.root + "/tmp"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        var environment = TestPaths.environmentWithPolicies(bundles.world.environment)
        environment["TMPDIR"] = scratch
        process.environment = environment
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(Data("hello\n".utf8))
        // Read until the reply: the extension runs, with a connection open.
        let seen = await offThePool { () -> String in
            var seen = ""
            let deadline = Date().addingTimeInterval(20)
            while !seen.contains("reply: hello\n") && Date() < deadline {
                let chunk = out.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                seen += String(decoding: chunk, as: UTF8.self)
            }
            return seen
        }
        #expect(seen.contains("reply: hello"), "\(seen)")
        let initPID = seen.split(separator: "\n").first { $0.hasPrefix("event: launched (sandbox init pid ") }
            .flatMap { Int32($0.dropFirst("event: launched (sandbox init pid ".count).dropLast()) }
        let sandboxPIDs = initPID.map { descendants(of: $0) } ?? []
        #expect(sandboxPIDs.count >= 2, "the init and the extension: \(sandboxPIDs)")
        kill(process.processIdentifier, signal)
        await offThePool { process.waitUntilExit() }
        #expect(process.terminationStatus == 128 + signal)
        let stderr = await offThePool { String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        #expect(stderr.contains("stopped: org.example.echo exited with status 0"), "\(stderr)")
        for pid in sandboxPIDs {
            #expect(Glibc.kill(pid, 0) == -1 && errno == ESRCH, "pid \(pid) of the sandbox still exists")
        }
        // The run's private approvals (a bundle run by path) are gone too.
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty)
    }

    @Test func testPassesOnAConformingExtensionAndItsJSONParses() async throws {
        let bundles = try Bundles()
        for (bundle, policy) in [(try bundles.echo(), "hardened"), (try bundles.nonconforming("conforming"), "standard")] {
            let output = try await bundles.run(["test", bundle, "--policy", policy, "--json"])
            #expect(output.status == 0, "\(output.stdout)\(output.stderr)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
            #expect(report["passed"] as? Bool == true)
            #expect(report["policy"] as? String == policy)
            let checks = report["checks"] as? [[String: Any]] ?? []
            #expect(checks.map { $0["name"] as? String } == [
                "manifest", "policy", "launch and READY", "handshake and version", "accepts a connection", "round trip",
                "file descriptor passing", "cancellation", "suspend and resume", "exit after GOODBYE", "no seccomp violation",
            ])
            #expect(checks.allSatisfy { $0["status"] as? String == "pass" }, "\(checks)")
            // Byte-level extensions: not typed, which fails nothing.
            let typed = try #require(report["typed-calls"] as? [String: Any], "\(report)")
            #expect(typed["result"] as? String == "not-typed", "\(typed)")
            #expect(typed["failed"] as? Int == 0, "\(typed)")
            let blocks = report["blocks"] as? [[String: Any]] ?? []
            #expect(blocks.contains { $0["what"] as? String == "@mount" && ($0["sandbox"] as? String)?.hasPrefix("killed") == true }, "\(blocks)")
            #expect(blocks.contains { $0["what"] as? String == "network" && $0["network"] as? String == "none" })
            // Counts as fields, not only the sentence.
            let mount = blocks.first { $0["what"] as? String == "@mount" }
            #expect((mount?["actions"] as? [String: Int])?["kill"] == mount?["syscalls"] as? Int && mount?["syscalls"] != nil, "\(mount ?? [:])")
        }
        // Without --json, a table, and no progress line when stdout is not a terminal.
        let text = try await bundles.run(["test", try bundles.echo("org.example.text"), "--policy", "hardened"])
        #expect(text.status == 0)
        #expect(text.stdout.contains("  PASS  suspend and resume"))
        #expect(text.stdout.contains("conformance of org.example.text: PASSED (11 of 11 checks passed); not a typed extension"), "\(text.stdout)")
        #expect(text.stdout.contains("Typed calls (docs/wire-protocol.md §12.4): not a typed extension: it answered the ping with bytes that are not a call result"), "\(text.stdout)")
        #expect(!text.stdout.contains("\r"))
    }

    /// Extensions that speak the call envelope, the Swift SDK's and the Python example's, pass the
    /// typed-calls block: the system target's ping echoes, a method that cannot exist is ERROR 22.
    @Test func testChecksTypedCallsOfTheSDKAndThePythonExtension() async throws {
        let bundles = try Bundles()
        let sdk = try bundles.world.install("org.example.actors", in: bundles.development,
                                            executableSource: TestPaths.product("xsb-actors-extension"))
        let python = try bundles.world.install("org.example.textfilter", in: bundles.development,
                                               executableSource: TestPaths.packageRoot.appendingPathComponent("Examples/python-textfilter/extension.py").path)
        for (bundle, policy) in [(sdk, "hardened"), (python, "standard")] {
            let output = try await bundles.run(["test", bundle, "--policy", policy, "--json"])
            #expect(output.status == 0, "\(output.stdout)\(output.stderr)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
            #expect(report["passed"] as? Bool == true)
            let typed = try #require(report["typed-calls"] as? [String: Any], "\(report)")
            #expect(typed["result"] as? String == "typed", "\(typed)")
            #expect(typed["passed"] as? Int == 2 && typed["failed"] as? Int == 0, "\(typed)")
            let probes = typed["probes"] as? [[String: Any]] ?? []
            #expect(probes.map { $0["name"] as? String } == ["ping", "unknown method"], "\(probes)")
            #expect(probes.map { $0["status"] as? String } == ["pass", "pass"], "\(probes)")
            #expect(probes.map { $0["answer"] as? String } == ["reply", "error"], "\(probes)")
            #expect(probes.last?["code"] as? Int == 22, "\(probes)")
        }
        let text = try await bundles.run(["test", sdk, "--policy", "hardened"])
        #expect(text.status == 0, "\(text.stdout)\(text.stderr)")
        #expect(text.stdout.contains("Typed calls (docs/wire-protocol.md §12.4): a typed extension\n  PASS  ping "), "\(text.stdout)")
        #expect(text.stdout.contains("  PASS  unknown method "), "\(text.stdout)")
        #expect(text.stdout.contains("PASSED (11 of 11 checks passed); typed calls: 2 of 2 passed"), "\(text.stdout)")
    }

    /// An extension that hangs on, ends on, or misanswers the call envelope fails the typed-calls
    /// block (and the run) with what to change; the other checks are all still run.
    @Test(arguments: [
        ("ping-silent", "ping", "no-answer", "the ping: no reply within 2 s"),
        ("ping-crash", "ping", "ended", "it ended during the ping: killed by signal 11"),
        ("ping-garbage", "ping", "wrong-value", "the ping's reply is a value, but not its argument"),
        ("ping-refused", "ping", "envelope-error", "it speaks the call envelope but refused the ping: error 21"),
        ("typed-sloppy", "unknown method", "replied", "a method that cannot exist was answered with a reply"),
    ])
    func testFailsAnExtensionThatMisanswersTypedCalls(mode: String, probe: String, reason: String, detail: String) async throws {
        let report = try await Bundles().failingReport(mode)
        let checks = report["checks"] as? [[String: Any]] ?? []
        #expect(checks.count == 11 && !checks.contains { $0["status"] as? String == "fail" }, "\(checks)")
        let typed = try #require(report["typed-calls"] as? [String: Any], "\(report)")
        #expect(typed["result"] as? String == "failed", "\(typed)")
        #expect(typed["failed"] as? Int == 1, "\(typed)")
        let probes = typed["probes"] as? [[String: Any]] ?? []
        let failed = try #require(probes.first { $0["name"] as? String == probe }, "\(probes)")
        #expect(failed["status"] as? String == "fail", "\(failed)")
        #expect(failed["reason"] as? String == reason, "\(failed)")
        #expect((failed["detail"] as? String)?.contains(detail) == true, "\(failed)")
        #expect((failed["fix"] as? String)?.contains("§12.4") == true, "\(failed)")
    }

    /// Each broken extension fails the check it breaks, with what to change.
    @Test(arguments: [
        ("silent", "round trip", "no reply within 2 s", "answer every REQUEST with exactly one REPLY or ERROR"),
        ("crash", "round trip", "killed by signal 11", "fix the crash"),
        ("forbidden", "no seccomp violation", "ptrace is forbidden by policy 'standard'", "do without ptrace"),
        ("bad-version", "handshake and version", "unsupported protocol version 2", "HELLO of protocol version 1"),
        ("lingers", "exit after GOODBYE", "after the host's GOODBYE: killed", "send GOODBYE back and exit 0"),
        ("wrong-ready", "launch and READY", "said READY as org.example.wrong-ready.other", "READY must carry exactly $EXTSANDBOX_EXTENSION_IDENTIFIER"),
    ])
    func testFailsABrokenExtensionWithWhatToChange(mode: String, check: String, detail: String, fix: String) async throws {
        let report = try await Bundles().failingReport(mode)
        let checks = report["checks"] as? [[String: Any]] ?? []
        let failed = try #require(checks.first { $0["name"] as? String == check }, "\(checks)")
        #expect(failed["status"] as? String == "fail", "\(failed)")
        #expect((failed["detail"] as? String)?.contains(detail) == true, "\(failed)")
        #expect((failed["fix"] as? String)?.contains(fix) == true, "\(failed)")
        #expect(checks.count == 11, "every check is reported, run or not: \(checks)")
    }

    @Test func testFailsAnInvalidBundleAtTheManifest() async throws {
        let bundles = try Bundles()
        let bundle = try bundles.world.install("org.example.broken", in: bundles.development,
                                               manifest: "schema: 1\nidentifier: org.example.broken\n")
        let output = try await bundles.run(["test", bundle, "--policy", "standard"])
        #expect(output.status == 1)
        #expect(output.stdout.contains("  FAIL  manifest"), "\(output.stdout)")
        #expect(output.stdout.contains("extension.yaml:1: missing 'point'"), "\(output.stdout)")
        #expect(output.stdout.contains("SKIP  launch and READY"))
    }

    /// The processes below `pid` (itself included), from /proc.
    private func descendants(of pid: Int32) -> [Int32] {
        var result: [Int32] = []
        var queue = [pid]
        while let next = queue.first {
            queue.removeFirst()
            result.append(next)
            for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(next)/task")) ?? [] {
                let children = (try? String(contentsOfFile: "/proc/\(next)/task/\(task)/children", encoding: .utf8)) ?? ""
                queue += children.split(separator: " ").compactMap { Int32($0) }
            }
        }
        return result
    }
}
