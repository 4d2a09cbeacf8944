import Foundation
import Glibc
import TestSupport
import Testing

/// scripts/install and scripts/uninstall (issue 13, "Install"), into a temporary prefix.
///
/// The test installs the CLI it already built (`--cli`, the debug build next to the runner)
/// rather than building the static release CLI with scripts/build-cli (minutes): what is tested
/// is the layout, the installed CLI finding its policies from its prefix, and the uninstall.
/// scripts/test builds generate-manual beforehand and names it in XSB_GENERATE_MANUAL, so that
/// the install runs no SwiftPM here.
@Suite("Install")
struct InstallTests {
    static let root = TestPaths.packageRoot.path

    /// Every path under `dir`, relative to it, sorted.
    static func tree(_ dir: String) -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: dir) else { return [] }
        return enumerator.compactMap { $0 as? String }.sorted()
    }

    /// The environment of a user of the installed CLI: no development directory, no cache.
    static var userEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["EXTSANDBOX_POLICIES_DIR"] = nil
        environment["EXTSANDBOX_NO_CACHE"] = "1"
        return environment
    }

    /// Runs `argv` from `/` (a directory unrelated to the checkout and the prefix).
    static func runFromRoot(_ argv: [String], as caller: Fixtures.Caller = .root) async throws -> Fixtures.Output {
        try await Fixtures.run(["/bin/sh", "-c", "cd / && exec \"$@\"", "sh"] + argv, as: caller, environment: userEnvironment)
    }

    @Test("install into a prefix, use it from anywhere, uninstall exactly what was installed")
    func installUseUninstall() async throws {
        let prefix = try TestPaths.makePolicyDirectory("prefix").path   // mode 755, owned by root
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        // Something of someone else's in the prefix: the uninstall leaves it.
        try FileManager.default.createDirectory(atPath: prefix + "/share/man/man1", withIntermediateDirectories: true)
        try "other\n".write(toFile: prefix + "/share/man/man1/other.1", atomically: true, encoding: .utf8)
        let before = Self.tree(prefix)

        let install = try await Fixtures.run(["/bin/bash", Self.root + "/scripts/install", "--prefix", prefix, "--cli", Fixtures.cli])
        try #require(install.status == 0, "install failed: \(install.stdout)\n\(install.stderr)")
        let installed = Set(Self.tree(prefix))
        for path in [
            "bin/extsandbox", "libexec/extsandbox/extsandbox-commands", "libexec/extsandbox/xsb-init",
            "share/extsandbox/policies/standard.yaml", "share/extsandbox/policies/restricted.yaml",
            "share/extsandbox/policies/hardened.yaml",
            "share/man/man1/extsandbox.1", "share/man/man1/extsandbox-exec.1", "share/man/man1/extsandbox-policy.1",
            "share/bash-completion/completions/extsandbox", "share/zsh/site-functions/_extsandbox",
            "share/fish/vendor_completions.d/extsandbox.fish", "share/extsandbox/install-manifest",
        ] {
            #expect(installed.contains(path), "not installed: \(path) (installed: \(installed.sorted()))")
        }
        let manifest = try String(contentsOfFile: prefix + "/share/extsandbox/install-manifest", encoding: .utf8)
        #expect(manifest.contains("file\t") && manifest.contains("\tbin/extsandbox\n"), "\(manifest)")
        #expect(manifest.contains("\tlibexec/extsandbox/xsb-init\n") && manifest.contains("dir\t-\tlibexec/extsandbox\n"), "\(manifest)")
        #expect(!manifest.contains("\tshare/man/man1\n"), "a directory that existed before is not the install's: \(manifest)")
        let page = try String(contentsOfFile: prefix + "/share/man/man1/extsandbox.1", encoding: .utf8)
        #expect(page.contains(".Nm extsandbox") || page.contains("extsandbox"), "\(page.prefix(300))")
        let bash = try String(contentsOfFile: prefix + "/share/bash-completion/completions/extsandbox", encoding: .utf8)
        #expect(bash.contains("complete") && bash.contains("exec"), "\(bash.prefix(300))")

        // The installed CLI, from an unrelated directory, as root and as nobody: its policies
        // come from its prefix.
        let cli = prefix + "/bin/extsandbox"
        for caller in Fixtures.Caller.allCases {
            let run = try await Self.runFromRoot([cli, "exec", "--", "/bin/true"], as: caller)
            // Nobody has no memory cgroup here: the shipped policy loads, and its whole-sandbox
            // memory limit then fails the launch, saying so (see MemoryScopeTests).
            #expect(run.status == 0 || (caller == .nobody && run.stderr.contains("memory-scope: per-process")),
                    "exec as \(caller): \(run.stdout) \(run.stderr)")
            let list = try await Self.runFromRoot([cli, "policy", "list"], as: caller)
            #expect(list.status == 0, "policy list as \(caller): \(list.stderr)")
            #expect(list.stdout.contains("1. \(prefix)/share/extsandbox/policies  (the install's policies)"), "\(list.stdout)")
            #expect(list.stdout.contains("standard    \(prefix)/share/extsandbox/policies/standard.yaml"), "\(list.stdout)")
        }
        // Its sandboxes' init comes from the prefix too: without it there, the launch fails and
        // names where it looked (no init of the build tree's, or of another install, is used).
        let initPath = prefix + "/libexec/extsandbox/xsb-init"
        try FileManager.default.moveItem(atPath: initPath, toPath: initPath + ".away")
        let withoutInit = try await Self.runFromRoot([cli, "exec", "--", "/bin/true"])
        try FileManager.default.moveItem(atPath: initPath + ".away", toPath: initPath)
        #expect(withoutInit.status == 125, "\(withoutInit.stderr)")
        #expect(withoutInit.stderr.contains("looked for \(prefix)/bin/xsb-init (missing), \(initPath) (missing)"), "\(withoutInit.stderr)")

        // `exec` runs in `extsandbox` itself; every other command is extsandbox-commands', which it
        // finds in PREFIX/libexec/extsandbox only (not the build tree's): without it there, those
        // fail and name where it was looked for, and `exec` still runs.
        let commandsPath = prefix + "/libexec/extsandbox/extsandbox-commands"
        try FileManager.default.moveItem(atPath: commandsPath, toPath: commandsPath + ".away")
        let listWithout = try await Self.runFromRoot([cli, "policy", "list"])
        let execWithout = try await Self.runFromRoot([cli, "exec", "--", "/bin/true"])
        try FileManager.default.moveItem(atPath: commandsPath + ".away", toPath: commandsPath)
        #expect(listWithout.status == 1, "\(listWithout.stdout) \(listWithout.stderr)")
        #expect(listWithout.stderr.contains("extsandbox-commands was not found (looked for \(prefix)/bin/extsandbox-commands and \(commandsPath))"),
                "\(listWithout.stderr)")
        #expect(execWithout.status == 0, "\(execWithout.stderr)")
        // One others could have written is never run.
        chmod(commandsPath, 0o775)
        let listUntrusted = try await Self.runFromRoot([cli, "policy", "list"])
        chmod(commandsPath, 0o755)
        #expect(listUntrusted.status == 1 && listUntrusted.stderr.contains("cannot use \(commandsPath)")
                && listUntrusted.stderr.contains("writable by its group"), "\(listUntrusted.stderr)")

        let version = try await Self.runFromRoot([cli, "--version"])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("extsandbox 0.1.0 ("), "\(version.stdout)")

        let uninstall = try await Fixtures.run(["/bin/bash", Self.root + "/scripts/uninstall", "--prefix", prefix])
        #expect(uninstall.status == 0, "uninstall failed: \(uninstall.stdout)\n\(uninstall.stderr)")
        #expect(Self.tree(prefix) == before, "left behind or removed too much: \(Self.tree(prefix)) (before: \(before))")
    }

    @Test("uninstall keeps a file changed since the install, and says so")
    func uninstallKeepsChangedFiles() async throws {
        let prefix = try TestPaths.makePolicyDirectory("prefix").path
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        let install = try await Fixtures.run(["/bin/bash", Self.root + "/scripts/install", "--prefix", prefix, "--cli", Fixtures.cli])
        try #require(install.status == 0, "install failed: \(install.stdout)\n\(install.stderr)")
        let edited = prefix + "/share/extsandbox/policies/standard.yaml"
        try "version: 1\n# edited\n".write(toFile: edited, atomically: true, encoding: .utf8)
        let uninstall = try await Fixtures.run(["/bin/bash", Self.root + "/scripts/uninstall", "--prefix", prefix])
        #expect(uninstall.status == 1)
        #expect(uninstall.stderr.contains("kept (changed since it was installed): \(edited)"), "\(uninstall.stderr)")
        #expect(Self.tree(prefix) == ["share", "share/extsandbox", "share/extsandbox/policies", "share/extsandbox/policies/standard.yaml"],
                "\(Self.tree(prefix))")
    }

    @Test("package-deb builds a Debian package whose CLI, unpacked, finds its policies")
    func debianPackage() async throws {
        // Optional (the "welcome"): ~30 s of packaging on a loaded 2-CPU machine, which
        // made the timing-sensitive lifecycle race tests running alongside fail.
        guard ProcessInfo.processInfo.environment["XSB_TEST_PACKAGE_DEB"] == "1" else {
            print("skipped: set XSB_TEST_PACKAGE_DEB=1 to build, check and unpack the Debian package (scripts/package-deb)")
            return
        }
        let output = try TestPaths.makePolicyDirectory("deb").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let build = try await Fixtures.run(["/bin/bash", Self.root + "/scripts/package-deb", "--output", output, "--cli", Fixtures.cli,
                                      "--compression", "none"])
        try #require(build.status == 0, "package-deb failed: \(build.stdout)\n\(build.stderr)")
        let deb = build.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(deb.hasPrefix(output + "/extsandbox_0.1.0_") && deb.hasSuffix(".deb"), "\(deb)")
        let contents = try await Fixtures.run(["/usr/bin/dpkg-deb", "--contents", deb])
        for path in ["./usr/bin/extsandbox", "./usr/libexec/extsandbox/extsandbox-commands", "./usr/libexec/extsandbox/xsb-init", "./usr/share/extsandbox/policies/standard.yaml", "./usr/share/man/man1/extsandbox.1.gz",
                     "./usr/share/bash-completion/completions/extsandbox", "./usr/share/zsh/vendor-completions/_extsandbox"] {
            #expect(contents.stdout.contains(" \(path)\n"), "\(path) not in the package: \(contents.stdout)")
        }
        #expect(!contents.stdout.contains("install-manifest"))
        let unpacked = output + "/root"
        #expect(try await Fixtures.run(["/usr/bin/dpkg-deb", "-x", deb, unpacked]).status == 0)
        let run = try await Self.runFromRoot([unpacked + "/usr/bin/extsandbox", "exec", "--", "/bin/true"])
        #expect(run.status == 0, "\(run.stderr)")
    }
}
