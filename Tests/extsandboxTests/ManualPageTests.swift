import Foundation
import Glibc
import TestSupport
import Testing

/// The man pages scripts/install puts in a prefix: each renders without a warning, each command
/// has its own page that `man` finds by the usual name, EXIT STATUS gives the real codes, and a
/// document a page names is installed.
@Suite("Man pages")
struct ManualPageTests {
    /// Where the pages say the documentation is: the install is staged for /usr/local, as
    /// scripts/package-deb stages one for /usr (the test prefix's long path would not fit a line).
    static let finalPrefix = "/usr/local"

    /// Installs into a fresh prefix (the CLI already built) and returns the prefix.
    static func install() async throws -> String {
        let prefix = try TestPaths.makePolicyDirectory("man-prefix").path
        let install = try await Fixtures.run(["/bin/bash", InstallTests.root + "/scripts/install", "--prefix", prefix,
                                              "--final-prefix", finalPrefix, "--cli", Fixtures.cli])
        try #require(install.status == 0, "install failed: \(install.stdout)\n\(install.stderr)")
        return prefix
    }

    /// Every command's path below `extsandbox`, as the CLI describes itself (`exec`, `policy check`).
    static func commandPaths() async throws -> [[String]] {
        let dump = try await Fixtures.run([Fixtures.cli, "--experimental-dump-help"])
        try #require(dump.status == 0, "\(dump.stderr)")
        let root = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        func walk(_ command: [String: Any], _ path: [String]) -> [[String]] {
            let subcommands = command["subcommands"] as? [[String: Any]] ?? []
            return [path] + subcommands.flatMap { walk($0, path + [$0["commandName"] as? String ?? "?"]) }
        }
        return walk(try #require(root["command"] as? [String: Any]), [])
    }

    @Test("every page renders without a warning, is found by its command's name and says how it exits")
    func pages() async throws {
        let prefix = try await Self.install()
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        let manDirectory = prefix + "/share/man"
        let pages = try FileManager.default.contentsOfDirectory(atPath: manDirectory + "/man1").sorted()

        let commands = try await Self.commandPaths()
        #expect(commands.contains(["exec"]) && commands.contains(["policy", "check"]), "\(commands)")
        #expect(Set(pages) == Set(commands.map { (["extsandbox"] + $0).joined(separator: "-") + ".1" }),
                "one page per command, named as man looks it up: \(pages)")

        for command in commands {
            let name = (["extsandbox"] + command).joined(separator: "-")
            let page = manDirectory + "/man1/\(name).1"
            // Warnings as errors: groff's mdoc checks (an empty input line is one).
            let groff = try await Fixtures.run(["/usr/bin/groff", "-mandoc", "-ww", "-z", page])
            #expect(groff.status == 0 && groff.stderr.isEmpty, "\(name): \(groff.stderr)")
            let found = try await Fixtures.run(["/usr/bin/man", "-M", manDirectory, "-w", name])
            #expect(found.status == 0 && found.stdout == page + "\n", "man \(name): \(found.stdout)\(found.stderr)")

            let source = try String(contentsOfFile: page, encoding: .utf8)
            #expect(source.contains(".Dt \(name.uppercased()) 1\n"), "\(name): title")
            #expect(!source.contains(".Ex -std"), "\(name): the generic exit status")
            #expect(!source.contains("Xr extsandbox."), "\(name): a reference to a page name man does not find")
            #expect(!source.contains("docs/"), "\(name) names the checkout's docs/")
            // A document the page names is installed (the path may break after each slash: \:).
            let documents = source.replacingOccurrences(of: "\\:", with: "")
                .matches(of: /(\/[a-z\/]+)\/share\/doc\/extsandbox\/([A-Za-z0-9_-]+\.md)/)
            for match in documents {
                #expect(match.1 == Self.finalPrefix, "\(name) names \(match.0)")
                #expect(FileManager.default.fileExists(atPath: prefix + "/share/doc/extsandbox/" + match.2), "\(name) names \(match.0)")
            }
            if ["extsandbox", "extsandbox-policy", "extsandbox-test"].contains(name) {
                #expect(!documents.isEmpty, "\(name) names no installed document")
            }
            let exitStatus = try #require(source.components(separatedBy: ".Sh \"EXIT STATUS\"\n").last?
                .components(separatedBy: "\n.Sh").first, "\(name): no EXIT STATUS")
            #expect(exitStatus.contains("0 ") || exitStatus.contains("0;"), "\(name): \(exitStatus)")
            #expect(exitStatus.contains("64"), "\(name): no usage error in \(exitStatus)")
        }

        let exec = try String(contentsOfFile: manDirectory + "/man1/extsandbox-exec.1", encoding: .utf8)
        let execExit = exec.components(separatedBy: ".Sh \"EXIT STATUS\"\n").last ?? ""
        for code in ["128+N", "159", "125", "126", "127", "64"] {
            #expect(execExit.contains(code), "exec's EXIT STATUS lacks \(code): \(execExit)")
        }
        let rendered = try await Fixtures.run(["/usr/bin/man", "-M", manDirectory, "-P", "cat", "extsandbox-run"],
                                              environment: ["MANWIDTH": "200", "PATH": "/usr/bin:/bin"])
        #expect(rendered.stdout.contains("EXIT STATUS") && rendered.stdout.contains("125 when the extension could not be launched"),
                "\(rendered.stdout)\(rendered.stderr)")
        #expect(!rendered.stdout.contains("if an error occurs"), "\(rendered.stdout)")
    }
}
