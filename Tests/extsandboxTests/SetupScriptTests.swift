import Foundation
import Testing
import TestSupport

/// scripts/setup installs what each use needs, and no more: the demo's setup installs no test or
/// benchmark packages, and the tests need no container tooling for their seccomp profiles.
@Suite("scripts/setup")
struct SetupScriptTests {
    static let root = TestPaths.packageRoot.path

    /// The packages `scripts/setup OPTIONS --list` names (it installs nothing).
    static func packages(_ options: [String]) async throws -> [String] {
        let output = try await Fixtures.run(["/bin/bash", root + "/scripts/setup"] + options + ["--list"])
        #expect(output.status == 0, "\(output.stderr)")
        return output.stdout.split(separator: "\n").map(String.init)
    }

    @Test("building and the demo: the libraries and python3 only; the tests and the benchmarks add theirs")
    func packagesForEachUse() async throws {
        let demo = try await Self.packages([])
        #expect(demo == ["libseccomp-dev", "libcap-dev", "libyaml-dev", "libssl-dev", "pkg-config", "python3", "e2fsprogs"], "\(demo)")
        let tests = try await Self.packages(["--tests"])
        #expect(Set(demo).isSubset(of: tests), "\(tests)")
        for package in ["sqlite3", "util-linux", "groff-base", "man-db"] { #expect(tests.contains(package), "\(tests)") }
        #expect(try await Self.packages(["--bench"]).contains("bubblewrap"))
        // Container tooling: Podman's profile comes with the tests.
        for use in [[], ["--tests"], ["--bench"], ["--tests", "--bench"]] {
            let listed = try await Self.packages(use)
            for unwanted in ["golang-github-containers-common", "containernetworking-plugins", "netavark", "iptables"] {
                #expect(!listed.contains(unwanted), "\(use): \(unwanted)")
            }
        }
        #expect(try await Fixtures.run(["/bin/bash", Self.root + "/scripts/setup", "--nonsense"]).status == 2)
    }

    @Test("each script asks for its own use; the tests' profile is a fixture with its license")
    func scriptsAndFixture() throws {
        func script(_ name: String) throws -> String { try String(contentsOfFile: Self.root + "/scripts/" + name, encoding: .utf8) }
        #expect(try script("test").contains("\nbash scripts/setup --tests\n"))
        #expect(try script("bench").contains("\nbash scripts/setup --bench >&2\n"))
        #expect(try script("demo").contains("\nbash scripts/setup\n"))
        let fixtures = TestPaths.fixturesDirectory + "/docker-seccomp/"
        let profile = try Data(contentsOf: URL(fileURLWithPath: fixtures + "containers-common-seccomp.json"))
        #expect(try JSONSerialization.jsonObject(with: profile) is [String: Any])
        #expect(try String(contentsOfFile: fixtures + "LICENSE-Apache-2.0", encoding: .utf8).contains("Apache License"))
        #expect(try String(contentsOfFile: fixtures + "README.md", encoding: .utf8).contains("containers-common-seccomp.json"))
    }
}
