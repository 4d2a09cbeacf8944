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
        ("/proc/\u{301}x", nil),
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
