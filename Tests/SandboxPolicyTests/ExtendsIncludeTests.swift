import Foundation
import Glibc
import Testing
import TestSupport
@testable import SandboxPolicy

/// A broken set of files and the one problem expected, in `file`.
struct BrokenTree: Sendable, CustomTestStringConvertible {
    var label: String
    var files: [String: String]
    var top: String = "a.yaml"
    var file: String
    var line: Int
    var column: Int
    var message: String
    var testDescription: String { label }
}

private let base = """
    version: 1
    description: the base
    seccomp:
      default: kill
      allow: ["@default", "@basic-io", "@file-system", "~open_tree"]
      kill: [socket]
      rules:
        - {syscall: ioctl, action: errno ENOTTY, why: no terminals}
    filesystem:
      ro-bind: [/usr]
      tmpfs: { /tmp: 64M }
    environment:
      pass: [PATH]
      set: { HOME: /tmp, LANG: C }
    limits:
      memory: 1G
      processes: 10
    """

@Suite("extends and include", .offThePool)
struct ExtendsIncludeTests {
    @Test func extendingMergesByTheDocumentedRules() throws {
        let tree = try PolicyTree([
            "base.yaml": base,
            "net.yaml": """
                version: 1
                seccomp:
                  allow: [sendmsg, recvmsg]
                environment:
                  pass: [TERM, PATH]
                """,
            "child.yaml": """
                version: 1
                extends: base
                include: [./net.yaml]
                description: the child
                seccomp:
                  default: errno EPERM       # scalar: the extending file wins
                  allow: ["~@file-system", openat, "~sendmsg"]   # lists concatenate: ~ removes what base and net added
                  errno: { EACCES: [socket] }   # the strongest action still wins: socket stays killed
                  rules:
                    - {syscall: ioctl, action: allow, why: terminals after all}   # replaces base's rule
                filesystem:
                  ro-bind: [/tmp]            # replaces base's tmpfs /tmp, in its place
                  ro-bind-optional: [/lib64]
                environment:
                  set: { LANG: C.UTF-8 }
                limits:
                  processes: none            # clears base's limit
                  cpu-seconds: 5
                """,
        ])
        let p = try tree.load("child.yaml")
        #expect(p.name == "child")
        #expect(p.description == "the child")
        #expect(p.composedFrom == [tree.path("base.yaml"), tree.path("net.yaml"), tree.path("child.yaml")])
        #expect(p.seccomp.defaultAction == .errno(1))
        func action(_ name: String) -> SyscallAction? {
            p.seccomp.rules.first { $0.syscall == name && $0.conditions.isEmpty }?.action
        }
        #expect(action("read") == .allow)
        #expect(action("openat") == .allow)
        #expect(action("mkdir") == nil)  // removed with ~@file-system: the default applies
        #expect(action("recvmsg") == .allow)
        #expect(action("sendmsg") == nil)
        #expect(action("socket") == .killProcess)
        #expect(action("ioctl") == .allow)
        #expect(p.seccomp.rules.first { $0.syscall == "ioctl" }?.justification == "terminals after all")
        #expect(p.filesystem.mounts == [
            .bind(source: "/usr", destination: "/usr", writable: false, optional: false),
            .bind(source: "/tmp", destination: "/tmp", writable: false, optional: false),
            .bind(source: "/lib64", destination: "/lib64", writable: false, optional: true),
        ])
        #expect(p.environment.pass == ["PATH", "TERM"])
        #expect(p.environment.set == ["HOME": "/tmp", "LANG": "C.UTF-8"])
        #expect(p.limits == ResourceLimits(memoryBytes: 1 << 30, processes: nil, cpuSeconds: 5))
        _ = try p.compileSeccompFilter(mode: .inKernel)
    }

    @Test("masks and mounts are merged by the bytes of their paths: two spellings of one character are two files")
    func pathsMergedByBytes() throws {
        let tree = try PolicyTree([
            "masks.yaml": """
                version: 1
                seccomp:
                  default: kill
                  allow: ["@default"]
                filesystem:
                  ro-bind: [/usr, "/srv/caf\u{e9}"]
                  mask: ["/usr/caf\u{e9}"]
                """,
            "child.yaml": """
                version: 1
                extends: masks
                filesystem:
                  ro-bind: ["/srv/cafe\u{301}"]
                  mask: ["/usr/cafe\u{301}", "/usr/caf\u{e9}"]
                """,
        ])
        let policy = try tree.load("child.yaml")
        #expect(policy.filesystem.masked.map { Array($0.utf8) } == [Array("/usr/caf\u{e9}".utf8), Array("/usr/cafe\u{301}".utf8)])
        let destinations = policy.filesystem.mounts.compactMap { entry -> [UInt8]? in
            if case .bind(_, let destination, _, _) = entry, destination.hasPrefix("/srv") { return Array(destination.utf8) }
            return nil
        }
        #expect(destinations == [Array("/srv/caf\u{e9}".utf8), Array("/srv/cafe\u{301}".utf8)])
    }

    @Test("a path whose slash a combining mark follows is absolute, read by its bytes")
    func slashBeforeACombiningMark() throws {
        let tree = try PolicyTree(["marks.yaml": """
            version: 1
            seccomp:
              default: kill
              allow: ["@default"]
            filesystem:
              mask: ["/\u{301}x//y"]
            """])
        #expect(try tree.load("marks.yaml").filesystem.masked.map { Array($0.utf8) } == [Array("/\u{301}x/y".utf8)])
    }

    @Test("two included files whose names are two spellings of one character are both read")
    func includesSpelledAlike() throws {
        let tree = try PolicyTree([
            "top.yaml": """
                version: 1
                include: [./Kiosk.yaml, "./\u{212A}iosk.yaml"]
                seccomp:
                  default: kill
                  allow: ["@default"]
                """,
            "Kiosk.yaml": "version: 1\nfilesystem:\n  mask: [/srv/a]\n",
        ])
        // Written apart: as dictionary keys the two names are one.
        let fd = open(tree.path("\u{212A}iosk.yaml"), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        let text = Array("version: 1\nfilesystem:\n  mask: [/srv/b]\n".utf8)
        #expect(fd >= 0 && write(fd, text, text.count) == text.count)
        close(fd)
        #expect(try tree.load("top.yaml").filesystem.masked == ["/srv/a", "/srv/b"])
    }

    @Test("a policy name holds no slash byte, whatever character a mark makes of it")
    func nameWithAHiddenSlash() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect {
            try PolicySearchPath(directories: [directory.path]).locate(name: "a\u{600}/../\u{301}x", excluding: nil)
        } throws: { ($0 as? PolicyError)?.message.contains("not a policy name") == true }
    }

    @Test("a policy file's name is its file name without the bytes of .yaml, whatever a mark joins")
    func policyNamesCutAsBytes() throws {
        let tree = try PolicyTree(["x.yaml": "version: 1\n"])
        let fd = open(tree.path("x\u{600}.yaml"), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        #expect(fd >= 0)
        close(fd)
        let names = tree.searchPath.entries().map { Array($0.name.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
        #expect(names == [Array("x".utf8), Array("x\u{600}".utf8)])
    }

    @Test func includedFragmentsNeedNoSeccompOfTheirOwn() throws {
        let tree = try PolicyTree([
            "fragments/limits.yaml": "version: 1\nlimits: { memory: 64M }\n",
            "fragments/fs.yaml": "version: 1\nfilesystem: { ro-bind-optional: [/lib] }\n",
            "p.yaml": minimalPolicy + "\ninclude: [fragments/limits.yaml, fragments/fs.yaml]\n",
        ])
        let p = try tree.load("p.yaml")
        #expect(p.limits.memoryBytes == 64 << 20)
        #expect(p.filesystem.mounts == [.bind(source: "/lib", destination: "/lib", writable: false, optional: true)])
        // A fragment alone is not a policy.
        #expect(tree.check("fragments/limits.yaml").map(\.message) == ["missing required section \"seccomp\""])
    }

    @Test func aFileReachedTwiceIsMergedOnce() throws {
        let tree = try PolicyTree([
            "common.yaml": "version: 1\nseccomp:\n  allow: [getpid]\n",
            "x.yaml": "version: 1\ninclude: [common.yaml]\n",
            "y.yaml": "version: 1\ninclude: [common.yaml]\n",
            "p.yaml": minimalPolicy + "\ninclude: [x.yaml, y.yaml]\n",
        ])
        let p = try tree.load("p.yaml")
        #expect(p.composedFrom.map { ($0 as NSString).lastPathComponent } == ["common.yaml", "x.yaml", "y.yaml", "p.yaml"])
    }

    @Test func anAdminCopyCanExtendTheShippedPolicyOfTheSameName() throws {
        let shipped = try PolicyTree(["standard.yaml": base])
        let admin = try PolicyTree(["standard.yaml": "version: 1\nextends: standard\nlimits: { memory: 2G }\n"])
        let path = PolicySearchPath(directories: [shipped.dir.path, admin.dir.path])
        let p = try PolicyLoader.load(nameOrPath: "standard", searchPath: path)
        #expect(p.sourcePath == admin.path("standard.yaml"))
        #expect(p.description == "the base")
        #expect(p.limits.memoryBytes == 2 << 30)
        #expect(p.composedFrom == [shipped.path("standard.yaml"), admin.path("standard.yaml")])
        let entries = path.entries()
        #expect(entries.map(\.isEffective) == [false, true])
        #expect(entries.map(\.file) == [shipped.path("standard.yaml"), admin.path("standard.yaml")])
    }

    @Test func memoryScopeDefaultsToTheSandboxAndALaterLayerWins() throws {
        let tree = try PolicyTree([
            "base.yaml": base,
            "opt-in.yaml": "version: 1\nextends: ./base.yaml\nlimits: { memory-scope: per-process }\n",
            "back.yaml": "version: 1\nextends: ./opt-in.yaml\nlimits:\n  memory-scope: sandbox\n",
        ])
        #expect(try tree.load("base.yaml").limits.memoryScope == .sandbox)
        let optIn = try tree.load("opt-in.yaml")
        #expect(optIn.limits.memoryScope == .perProcess)
        #expect(optIn.limits.memoryBytes == (try tree.load("base.yaml")).limits.memoryBytes)
        #expect(try tree.load("back.yaml").limits.memoryScope == .sandbox)
    }

    /// The example of docs/policy-format.md, "Writing a policy for a new program".
    @Test func theDocumentedWalkthroughExampleLoads() throws {
        let tree = try PolicyTree(["thumbnailer.yaml": """
            version: 1
            description: The thumbnailer extension
            extends: hardened
            seccomp:
              allow:
                - fstatfs                 # checks the file system type of its input
              rules:
                - syscall: openat         # writes its cache, and only there: the policy binds /var/cache/thumbs
                  action: allow
                  when: ["arg2 & O_ACCMODE == O_WRONLY"]
                  why: The thumbnail cache; the only writable bind is /var/cache/thumbs.
            filesystem:
              bind: [/var/cache/thumbs]
            """])
        let shipped = PolicySearchPath(directories: [packageRoot.appendingPathComponent("Policies").path])
        let p = try PolicyLoader.load(file: tree.path("thumbnailer.yaml"), searchPath: shipped)
        #expect(!p.seccomp.allowExecAfterStart)  // from hardened
        let filter = try p.compileSeccompFilter(mode: .supervised)
        let openat = Syscalls.number(of: "openat")!
        #expect(filter.evaluate(syscall: openat, arguments: [0, 0, 0x41]) == SeccompReturn.allow)  // O_WRONLY | O_CREAT
        #expect(filter.evaluate(syscall: openat, arguments: [0, 0, 0x42]) == SeccompReturn.errno | 13)  // O_RDWR | O_CREAT
        #expect(p.filesystem.mounts.last == .bind(source: "/var/cache/thumbs", destination: "/var/cache/thumbs", writable: true, optional: false))
    }

    @Test func eightLevelsAreFine() throws {
        var files = ["p8.yaml": base]
        for i in 0..<8 { files["p\(i).yaml"] = "version: 1\nextends: ./p\(i + 1).yaml\n" }
        let tree = try PolicyTree(files)
        #expect(try tree.load("p0.yaml").composedFrom.count == 9)
    }

    static let brokenTrees: [BrokenTree] = [
        BrokenTree(label: "extends cycle", files: [
            "a.yaml": "version: 1\nextends: ./b.yaml\n",
            "b.yaml": "version: 1\nextends: ./a.yaml\n",
        ], file: "b.yaml", line: 2, column: 10, message: "extends cycle: {dir}/a.yaml → {dir}/b.yaml → {dir}/a.yaml; a policy cannot extend or include itself"),
        BrokenTree(label: "include of itself", files: [
            "a.yaml": minimalPolicy + "\ninclude: [a.yaml]\n",
        ], file: "a.yaml", line: 5, column: 11, message: "include cycle: {dir}/a.yaml → {dir}/a.yaml"),
        BrokenTree(label: "cycle through an include and an extends by name", files: [
            "a.yaml": minimalPolicy + "\ninclude: [frag.yaml]\n",
            "frag.yaml": "version: 1\nextends: a\n",
        ], file: "frag.yaml", line: 2, column: 10, message: "extends cycle: {dir}/a.yaml → {dir}/frag.yaml → {dir}/a.yaml"),
        BrokenTree(label: "nine levels are too deep", files: {
            var files = ["p9.yaml": minimalPolicy]
            for i in 0..<9 { files["p\(i).yaml"] = "version: 1\nextends: ./p\(i + 1).yaml\n" }
            return files
        }(), top: "p0.yaml", file: "p8.yaml", line: 2, column: 10,
            message: "extends nests too deeply: {dir}/p0.yaml → {dir}/p1.yaml → {dir}/p2.yaml → {dir}/p3.yaml → {dir}/p4.yaml → {dir}/p5.yaml → {dir}/p6.yaml → {dir}/p7.yaml → {dir}/p8.yaml → {dir}/p9.yaml; extends and include may nest at most 8 files deep"),
        BrokenTree(label: "error inside an included file", files: [
            "a.yaml": minimalPolicy + "\ninclude: [frag.yaml]\n",
            "frag.yaml": "version: 1\n# a fragment\nseccomp:\n  allow: [getpid, opnat]\n",
        ], file: "frag.yaml", line: 4, column: 19, message: "unknown system call \"opnat\"; did you mean \"openat\"?"),
        BrokenTree(label: "error inside an extended file", files: [
            "a.yaml": "version: 1\nextends: base\n",
            "base.yaml": minimalPolicy + "\nlimits:\n  memory: lots\n",
        ], file: "base.yaml", line: 6, column: 11, message: "bad value \"lots\" for memory"),
        BrokenTree(label: "dangerous group in a fragment", files: [
            "a.yaml": minimalPolicy + "\ninclude: [frag.yaml]\n",
            "frag.yaml": "version: 1\nseccomp:\n  allow: [\"@aio\"]\n",
        ], file: "frag.yaml", line: 3, column: 12, message: "\"@aio\" in allow lets dangerous system calls run: io_uring_enter, io_uring_register, io_uring_setup"),
        BrokenTree(label: "missing included file", files: [
            "a.yaml": minimalPolicy + "\ninclude:\n  - ../nowhere/frag.yaml\n",
        ], file: "a.yaml", line: 6, column: 5, message: "cannot include \"../nowhere/frag.yaml\": {parent}/nowhere/frag.yaml: no such policy file"),
        BrokenTree(label: "unknown policy name", files: [
            "a.yaml": "version: 1\nextends: standart\n",
            "standard.yaml": minimalPolicy,
        ], file: "a.yaml", line: 2, column: 10, message: "cannot extend \"standart\": no policy named \"standart\" other than the file itself; did you mean \"standard\"?"),
        BrokenTree(label: "a conditional rule without effect across files", files: [
            "a.yaml": "version: 1\nextends: base\nseccomp:\n  rules:\n    - {syscall: kill, action: errno EPERM, when: \"arg1 == 9\"}\n",
            "base.yaml": minimalPolicy + "\n  rules:\n    - {syscall: kill, action: errno EPERM}\n",
        ], file: "a.yaml", line: 5, column: 7, message: "this rule has no effect: kill is already failing with EPERM by the rule without conditions at {dir}/base.yaml:6"),
        BrokenTree(label: "no default anywhere", files: [
            "a.yaml": "version: 1\ninclude: [frag.yaml]\nseccomp:\n  allow: [\"@default\"]\n",
            "frag.yaml": "version: 1\nseccomp:\n  allow: [getpid]\n",
        ], file: "a.yaml", line: 4, column: 3, message: "seccomp needs a \"default\" action"),
        BrokenTree(label: "no seccomp anywhere", files: [
            "a.yaml": "version: 1\ninclude: [frag.yaml]\n",
            "frag.yaml": "version: 1\nlimits: {memory: 1G}\n",
        ], file: "a.yaml", line: 1, column: 1, message: "missing required section \"seccomp\" (neither this file nor the files it extends or includes has one)"),
        BrokenTree(label: "execve killed by the extending file", files: [
            "a.yaml": "version: 1\nextends: ./base.yaml\nseccomp:\n  kill: [execve]\n",
            "base.yaml": minimalPolicy,
        ], file: "a.yaml", line: 4, column: 10, message: "execve must be allowed without conditions"),
    ]

    @Test(arguments: brokenTrees)
    func reportsTheProblemInTheRightFile(_ c: BrokenTree) throws {
        let tree = try PolicyTree(c.files)
        let dir = tree.dir.path
        let parent = tree.dir.deletingLastPathComponent().path
        let message = c.message.replacingOccurrences(of: "{dir}", with: dir).replacingOccurrences(of: "{parent}", with: parent)
        let found = tree.check(c.top)
        let first = try #require(found.first, "no problem reported")
        #expect(found.count == 1, "\(found)")
        #expect(first.file == tree.path(c.file), "\(first)")
        #expect(first.line == c.line, "\(first)")
        #expect(first.column == c.column, "\(first)")
        #expect(first.message.contains(message), "\(first.message)\nexpected: \(message)")
        #expect(throws: first) { try tree.load(c.top) }
    }

    @Test func everyProblemOfEveryFileIsReported() throws {
        let tree = try PolicyTree([
            "a.yaml": "version: 1\ninclude: [frag.yaml]\nseccomp:\n  default: kil\n",
            "frag.yaml": "version: 1\nseccomp:\n  allow: [opnat]\nlimits: {memory: lots}\n",
        ])
        let found = tree.check("a.yaml")
        #expect(found.map { ($0.file as NSString).lastPathComponent } == ["a.yaml", "frag.yaml", "frag.yaml"])
        #expect(found.map(\.line) == [4, 3, 4])
    }
}
