import Glibc
@testable import SandboxRuntime
import SandboxPolicy
import Testing

/// The mount plan's checks on the host, without a sandbox (the launches that use them are in
/// FailClosedTests and MaskedPathTests).
@Suite("Mount plan")
struct MountPlanTests {
    @Test("a destination is normalized, or refused when relative, with . or .., or where the shim provides it", arguments: [
        ("/data", "/data"), ("/data/x", "/data/x"), ("//data///x/", "/data/x"), ("/procx", "/procx"), ("/devices", "/devices"),
        ("/", nil), ("//", nil), ("/proc", nil), ("/proc/", nil), ("/proc/sys", nil), ("//proc//sys", nil), ("/dev", nil),
        ("/dev/sda", nil), ("relative", nil), ("", nil), ("/a/../etc", nil), ("/a/./b", nil), ("/a/..", nil),
        // Byte by byte, as the kernel reads them: a combining mark after a slash does not hide
        // what follows the slash, and "/proc" with a mark after it is another name.
        ("/proc/\u{301}x", nil), ("/a/../\u{301}b", nil), ("/\u{301}x", "/\u{301}x"), ("/proc\u{301}", "/proc\u{301}"),
        // C would read these only up to the NUL.
        ("/proc\u{0}x", nil), ("/dev\u{0}", nil), ("/data\u{0}/x", nil),
    ] as [(String, String?)])
    func destination(path: String, expected: String?) {
        #expect((try? MountPlan.checkedDestination(path)) == expected)
    }

    @Test("parents are mounted before children, in the order given at equal depth")
    func order() throws {
        let policy = Policy(name: "order", seccomp: SeccompPolicy(), filesystem: FilesystemPolicy(mounts: [
            .bind(source: "/usr/lib", destination: "/a/b/c", writable: false, optional: false),
            .tmpfs(destination: "/a", sizeBytes: 1 << 20),
            .bind(source: "/usr", destination: "/a/b", writable: false, optional: false),
            .tmpfs(destination: "/z", sizeBytes: 1 << 20),
        ]))
        let plan = try MountPlan(policy: policy, extraMounts: [], hostname: "h", uid: 1, gid: 1)
        let targets = plan.operations.map { operation -> String in
            switch operation {
            case .bind(_, let target, _, _, _), .tmpfs(let target, _), .symlink(let target, _), .file(let target, _),
                 .mask(let target, _), .absentMask(let target): return target
            }
        }
        #expect(targets == ["/a", "/z", "/a/b", "/a/b/c", "/etc/passwd", "/etc/group", "/etc/hostname", "/etc/hosts"])
    }

    @Test("a bind source is resolved through root's symlinks, with what lstat says of the result")
    func resolvedSource() throws {
        var expected = stat()
        #expect(stat("/usr/bin", &expected) == 0)
        let (path, info) = try BindSource.resolved("/usr/./lib/../bin")
        #expect(path == "/usr/bin")
        #expect(info.st_ino == expected.st_ino && info.st_dev == expected.st_dev)
        let root = try BindSource.resolved("/usr/..")
        #expect(root.path == "/")
        #expect(root.info.st_mode & S_IFMT == S_IFDIR)
    }
}

@Suite("Mount plan: host paths")
struct MountPlanHostPathTests {
    /// A fresh directory with `names` as subdirectories; removed by the caller.
    static func directory(_ names: [String] = []) throws -> String {
        var template = Array("/tmp/xsb-plan-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw SandboxError(step: .configuration, errorNumber: errno, detail: "mkdtemp") }
        let path = String(cString: made)
        chmod(path, 0o755)
        for name in names { mkdir(path + "/" + name, 0o755) }
        return path
    }

    static func policy(_ mounts: [MountEntry], masked: [String] = []) -> Policy {
        Policy(name: "paths", seccomp: SeccompPolicy(), filesystem: FilesystemPolicy(mounts: mounts, masked: masked))
    }

    @Test("of two binds at one target the later one covers what lies below it, as the shim mounts it")
    func laterBindWins() throws {
        let first = try Self.directory(), second = try Self.directory(), nested = try Self.directory()
        defer { for path in [first, second, nested] { rmdir(path) } }
        let plan = try MountPlan(policy: Self.policy([
            .bind(source: first, destination: "/a", writable: false, optional: false),
            .bind(source: second, destination: "/a", writable: false, optional: false),
            .bind(source: nested, destination: "/a/n", writable: false, optional: false),
        ]), extraMounts: [], hostname: "h", uid: 1, gid: 1)
        #expect(plan.nestedMountPoints == [second + "/n"])
    }

    @Test("a mask is placed by the bytes of its path: another spelling of a bound name is not that name")
    func maskSpelledOtherwise() throws {
        let data = try Self.directory(["caf\u{e9}"])
        defer { rmdir(data + "/caf\u{e9}"); rmdir(data) }
        // The same bytes: bound and masked at once is refused.
        #expect(throws: SandboxError.self) {
            _ = try MountPlan(policy: Self.policy([.bind(source: data, destination: "/caf\u{e9}", writable: false, optional: false)],
                                                  masked: ["/caf\u{e9}"]), extraMounts: [], hostname: "h", uid: 1, gid: 1)
        }
        // Another spelling is another path, below no bind: nothing shows it, nothing to mask.
        let plan = try MountPlan(policy: Self.policy([.bind(source: data, destination: "/caf\u{e9}", writable: false, optional: false)],
                                                     masked: ["/cafe\u{301}"]), extraMounts: [], hostname: "h", uid: 1, gid: 1)
        #expect(!plan.operations.contains { if case .mask = $0 { true } else if case .absentMask = $0 { true } else { false } })
        // Below the bind by bytes, though a mark joins its slash into one character: masked.
        let below = try MountPlan(policy: Self.policy([.bind(source: data, destination: "/d", writable: false, optional: false)],
                                                      masked: ["/d/\u{301}secret"]), extraMounts: [], hostname: "h", uid: 1, gid: 1)
        #expect(below.operations.contains(.absentMask(target: "/d/\u{301}secret")))
    }

    @Test("operations are equal only when their paths are the same bytes")
    func operationsEqualByBytes() {
        typealias Operation = MountPlan.Operation
        #expect(Operation.bind(source: "/srv/caf\u{e9}", target: "/d", writable: false, directory: true)
                == .bind(source: "/srv/caf\u{e9}", target: "/d", writable: false, directory: true))
        #expect(Operation.bind(source: "/srv/caf\u{e9}", target: "/d", writable: false, directory: true)
                != .bind(source: "/srv/cafe\u{301}", target: "/d", writable: false, directory: true))
        #expect(Operation.mask(target: "/caf\u{e9}", directory: false) != .mask(target: "/cafe\u{301}", directory: false))
        #expect(Operation.absentMask(target: "/caf\u{e9}") != .absentMask(target: "/cafe\u{301}"))
        #expect(Operation.file(target: "/etc/hostname", contents: "h\u{e9}\n") != .file(target: "/etc/hostname", contents: "he\u{301}\n"))
        #expect(Operation.symlink(target: "/l", linkText: "caf\u{e9}") != .symlink(target: "/l", linkText: "cafe\u{301}"))
        #expect(Operation.tmpfs(target: "/t", sizeBytes: 1) != .tmpfs(target: "/t", sizeBytes: 2))
        #expect(Operation.tmpfs(target: "/t", sizeBytes: 1) != .absentMask(target: "/t"))
    }

    @Test("with two binds at one target, a mask below it is looked up under the later one")
    func maskUnderLaterBind() throws {
        let first = try Self.directory(["sub"]), second = try Self.directory()
        defer { rmdir(first + "/sub"); rmdir(first); rmdir(second) }
        // "sub" exists only in the first source: looked up under the later bind, it is absent.
        let plan = try MountPlan(policy: Self.policy([
            .bind(source: first, destination: "/a", writable: false, optional: false),
            .bind(source: second, destination: "/a", writable: false, optional: false),
        ], masked: ["/a/sub"]), extraMounts: [], hostname: "h", uid: 1, gid: 1)
        #expect(plan.operations.contains(.absentMask(target: "/a/sub")))
    }

    @Test("a bind source with a NUL byte is refused")
    func sourceWithNul() {
        #expect(throws: SandboxError.self) {
            _ = try MountPlan(policy: Self.policy([.bind(source: "/usr\u{0}/x", destination: "/x", writable: false, optional: false)]),
                              extraMounts: [], hostname: "h", uid: 1, gid: 1)
        }
        #expect(throws: SandboxError.self) { _ = try BindSource.resolved("/usr\u{0}") }
    }

    @Test("a bind source's walk ends on the file a symlink at its end names, with that file's lstat")
    func symlinkAtTheEnd() throws {
        // /proc/self is root's symlink to /proc/PID (in a user namespace that does not map root,
        // its owner shows as nobody, and the walk rightly refuses it).
        var link = stat()
        guard lstat("/proc/self", &link) == 0, link.st_uid == 0 else {
            print("skipped: /proc/self is not owned by root here (uid \(link.st_uid)), so the walk does not follow it")
            return
        }
        let (path, info) = try BindSource.resolved("/proc/self")
        #expect(path == "/proc/\(getpid())")
        #expect(info.st_mode & S_IFMT == S_IFDIR)
        #expect(try BindSource.resolved("/proc/self/..").path == "/proc")
    }

    @Test("a slash followed by a combining mark separates components in the walk, as in the kernel")
    func markAfterSlash() throws {
        let base = try Self.directory(["u"])
        mkdir(base + "/u/\u{301}", 0o755)
        defer { rmdir(base + "/u/\u{301}"); rmdir(base + "/u"); rmdir(base) }
        // ".." goes up from the component named by the mark, not from "u".
        #expect(try BindSource.resolved(base + "/u/\u{301}/..").path == base + "/u")
    }

    @Test("a symlink not owned by root is refused even when a combining mark follows its slash",
          .enabled(if: getuid() == 0, "needs root: to give the symlink to another owner"))
    func untrustedLinkBeforeMark() throws {
        let base = try Self.directory(["target"])
        mkdir(base + "/target/\u{301}", 0o755)
        defer { unlink(base + "/link"); rmdir(base + "/target/\u{301}"); rmdir(base + "/target"); rmdir(base) }
        #expect(symlink("target", base + "/link") == 0)
        #expect(lchown(base + "/link", 65534, 65534) == 0)
        #expect(throws: SandboxError.self) { _ = try BindSource.resolved(base + "/link/\u{301}") }
    }

    @Test("a root-owned symlink with an absolute target starts the walk again at the root",
          .enabled(if: getuid() == 0, "needs root: only root-owned symlinks are followed"))
    func absoluteLink() throws {
        let base = try Self.directory()
        defer { unlink(base + "/link"); rmdir(base) }
        #expect(symlink("/usr/../usr/bin", base + "/link") == 0)
        let (path, info) = try BindSource.resolved(base + "/link/.")
        var expected = stat()
        #expect(stat("/usr/bin", &expected) == 0)
        #expect(path == "/usr/bin")
        #expect(info.st_ino == expected.st_ino)
    }
}
