@testable import SandboxExec
import Foundation
import SandboxPolicy
@testable import extsandbox
import Testing
import TestSupport

/// Without --chdir, `exec` starts the program in the caller's directory when a bind shows it
/// inside (as bwrap and firejail do), else in / with a hint.
@Suite("extsandbox exec: the starting directory", .offThePool)
struct StartingDirectoryTests {
    static func bind(_ source: String, _ destination: String? = nil) -> MountEntry {
        .bind(source: source, destination: destination ?? source, writable: false, optional: false)
    }

    /// Every path is its own real path here (no symlinks in the test's made-up tree).
    static func visible(_ directory: String, _ mounts: [MountEntry], masked: [String] = []) -> String? {
        StartingDirectory.visiblePath(of: directory, mounts: mounts, masked: masked, realPath: { $0 })
    }

    @Test("a bind shows the caller's directory at the same path, or below its destination")
    func visibleThroughABind() {
        #expect(Self.visible("/srv/work", [Self.bind("/usr"), Self.bind("/srv/work")]) == "/srv/work")
        #expect(Self.visible("/srv/work/sub", [Self.bind("/srv")]) == "/srv/work/sub")
        #expect(Self.visible("/srv/work/sub", [Self.bind("/srv/work", "/work")]) == "/work/sub")
        #expect(Self.visible("/srv/work", [Self.bind("/srv/work/", "/work/")]) == "/work")
        // The same path wins when two binds show it.
        #expect(Self.visible("/srv/work", [Self.bind("/srv/work", "/work"), Self.bind("/srv")]) == "/srv/work")
    }

    @Test("not visible: no bind, a deeper mount over it, a mask, or the sandbox's own /tmp")
    func notVisible() {
        #expect(Self.visible("/srv/work", [Self.bind("/usr")]) == nil)
        #expect(Self.visible("/srv/work", [Self.bind("/srv"), .tmpfs(destination: "/srv/work", sizeBytes: 1 << 20)]) == nil)
        #expect(Self.visible("/srv/work", [Self.bind("/srv"), Self.bind("/opt", "/srv")]) == nil)
        #expect(Self.visible("/srv/work/a", [Self.bind("/srv")], masked: ["/srv/work"]) == nil)
        #expect(Self.visible("/tmp/x", [Self.bind("/")]) == nil)
        #expect(Self.visible("/tmp/x", [Self.bind("/tmp/x")]) == "/tmp/x")
    }

    /// Before: paths were compared and split as characters, so a bind of a directory spelled
    /// like the caller's (a precomposed "é", "e" with a combining accent) showed it, a mask or
    /// mount spelled alike hid it, and a slash with a combining mark after it was no slash.
    @Test("paths are compared and split as bytes", arguments: [
        ("/srv/x/\u{301}y", [bind("/srv/x")], [], "/srv/x/\u{301}y"),
        ("/srv/x/\u{301}y", [bind("/srv/x", "/w")], [], "/w/\u{301}y"),
        ("/srv/\u{E9}", [bind("/srv/e\u{301}")], [], nil),
        ("/srv/\u{E9}/a", [bind("/srv")], ["/srv/e\u{301}"], "/srv/\u{E9}/a"),
        ("/srv/\u{E9}", [bind("/srv"), .tmpfs(destination: "/srv/e\u{301}", sizeBytes: 1 << 20)], [], "/srv/\u{E9}"),
        ("/srv/\u{E9}", [bind("/srv/\u{E9}", "/srv/e\u{301}"), bind("/srv")], [], "/srv/\u{E9}"),
    ] as [(String, [MountEntry], [String], String?)])
    func pathsAsBytes(directory: String, mounts: [MountEntry], masked: [String], expected: String?) {
        let visible = Self.visible(directory, mounts, masked: masked)
        #expect(visible.map { Array($0.utf8) } == expected.map { Array($0.utf8) }, "\(visible.map { Array($0.unicodeScalars) } ?? [])")
    }

    /// Before: the directories on the way were split at characters, so the one before a slash
    /// that a combining mark follows was never checked.
    @Test("as root, every directory on the way is checked, up to a slash a combining mark follows")
    func enteringChecksEachDirectoryByBytes() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let inner = directory.appendingPathComponent("private").path + "/\u{301}inner"
        try FileManager.default.createDirectory(atPath: inner, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        chmod(directory.appendingPathComponent("private").path, 0o700)
        #expect(!StartingDirectory.sandboxUserCanEnter(inner, asRoot: true))
        #expect(StartingDirectory.sandboxUserCanEnter(inner, below: inner, asRoot: true))
    }

    @Test("as root, a bound current directory nobody cannot enter: the program starts in /, and a hint says why")
    func rootsPrivateDirectory() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let inner = directory.appendingPathComponent("private")
        try FileManager.default.createDirectory(at: inner, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        #expect(!StartingDirectory.sandboxUserCanEnter(inner.path, asRoot: true))
        #expect(StartingDirectory.sandboxUserCanEnter(directory.path, asRoot: true))
        let result = try await Self.exec(in: inner, ["--ro-bind", directory.path, "--", "/bin/pwd"])
        #expect(result.status == 0 && result.stdout == "/\n", "\(result.stderr)")
        #expect(result.stderr.contains("cannot enter it, so the program starts in /"), "\(result.stderr)")
    }

    /// Before: the directories above the bind source counted too, so a project under /root
    /// (0700) started in / although the sandbox can enter the bind.
    @Test("as root, a bound current directory below a 0700 directory: the program starts in it")
    func rootsDirectoryBelowPrivateParent() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let project = directory.appendingPathComponent("home/project")
        try FileManager.default.createDirectory(at: project, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try "inside\n".write(to: project.appendingPathComponent("here.txt"), atomically: false, encoding: .utf8)
        chmod(directory.appendingPathComponent("home").path, 0o700)
        #expect(StartingDirectory.sandboxUserCanEnter(project.path, below: project.path, asRoot: true))
        #expect(!StartingDirectory.sandboxUserCanEnter(project.path, asRoot: true))
        let result = try await Self.exec(in: project, ["--ro-bind", project.path, "--", "/bin/cat", "here.txt"])
        #expect(result.status == 0 && result.stdout == "inside\n", "\(result.stdout)\(result.stderr)")
        #expect(!result.stderr.contains("hint"), "\(result.stderr)")
    }

    @Test("the hint: only for an argument naming a file of the caller's directory, and never from /")
    func hintOnlyWhenItHelps() {
        #expect(StartingDirectory.hint(hostDirectory: "/usr", arguments: ["-v", "bin", "/etc"])?.contains("'bin' is looked up there") == true)
        #expect(StartingDirectory.hint(hostDirectory: "/usr", arguments: ["-v", "no-such-file", "/etc"]) == nil)
        #expect(StartingDirectory.hint(hostDirectory: "/", arguments: ["usr"]) == nil)
    }

    /// A scratch directory holding `note.txt`, readable by the sandbox's host uid.
    static func scratch() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-cwd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o755])
        try Fixtures.writeFile(directory.appendingPathComponent("note.txt").path, Array("from the caller's directory\n".utf8), mode: 0o644)
        return directory
    }

    /// `extsandbox exec ARGUMENTS` run from `directory`.
    static func exec(in directory: URL, _ arguments: [String]) async throws -> Fixtures.Output {
        let quoted = arguments.map { "'\($0)'" }.joined(separator: " ")
        return try await Fixtures.run(["/bin/sh", "-c", "cd '\(directory.path)' && exec '\(TestPaths.cli)' exec \(quoted)"])
    }

    @Test("a bound current directory is where the program starts: relative paths work")
    func startsInTheBoundDirectory() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try await Self.exec(in: directory, ["--ro-bind", directory.path, "--", "/bin/sh", "-c", "pwd; cat note.txt"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "\(directory.path)\nfrom the caller's directory\n", "\(result.stderr)")
    }

    @Test("--chdir wins over the current directory")
    func chdirWins() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try await Self.exec(in: directory, ["--ro-bind", directory.path, "--chdir", "/usr", "--", "/bin/pwd"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "/usr\n", "\(result.stderr)")
    }

    @Test("an unbound current directory: the program starts in / and a hint says how to bind it")
    func hintWhenNotVisible() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try await Self.exec(in: directory, ["--", "/bin/cat", "note.txt"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("hint: the current directory \(directory.path) is not visible inside the sandbox"), "\(result.stderr)")
        #expect(result.stderr.contains("--ro-bind \"$PWD\""), "\(result.stderr)")
        // No file of the caller's directory named: no hint.
        let quiet = try await Self.exec(in: directory, ["--", "/bin/pwd"])
        #expect(quiet.status == 0 && quiet.stdout == "/\n" && quiet.stderr.isEmpty, "\(quiet.stderr)")
    }
}
