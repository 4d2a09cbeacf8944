import CMechanismSupport
@testable import SandboxRuntime
import Foundation
import Glibc
import Testing

/// mounts.c: a sandbox's whole file system (tmpfs root, binds, files, symlinks, masks, /proc,
/// /dev, /tmp, read-only remount, the old root detached), built by xsb_setup_mounts in a user,
/// mount and PID namespace of a forked child's own and looked at from inside.
@Suite("File system: what the sandbox sees")
struct MountTests {
    struct Op {
        var kind: xsb_mount_kind
        var flags: Int32 = 0
        var source = ""
        let target: String
        var size: UInt64 = 0
    }

    /// Runs xsb_setup_mounts with `ops` (a 8 MiB /tmp) and returns what the child saw.
    static func build(_ ops: [Op]) throws -> xsbt_outcome {
        let arena = CArena()
        var config = xsb_spawn_config()
        let mounts = arena.array(of: xsb_mount_op.self, count: ops.count)
        for (index, op) in ops.enumerated() {
            mounts[index] = xsb_mount_op(kind: Int32(op.kind.rawValue), flags: op.flags, source: UnsafePointer(arena.string(op.source)),
                                         target: UnsafePointer(arena.string(op.target)), size: op.kind == XSB_MOUNT_FILE ? UInt64(op.source.utf8.count) : op.size,
                                         mode: 0, tree: -1)
        }
        config.mounts = UnsafePointer(mounts)
        config.mount_count = ops.count
        config.tmp_size = 8 << 20
        return try outcome { xsbt_setup_mounts(&config, $0) }
    }

    /// A host directory holding `hello` ("hi"), removed after `body`.
    static func withDataDirectory<T>(_ body: (String) throws -> T) throws -> T {
        let directory = "/tmp/xsbt-mounts-\(getpid())-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "hi".write(toFile: directory + "/hello", atomically: false, encoding: .utf8)
        return try body(directory)
    }

    @Test("a read-only root with the policy's mounts, a fresh /proc, a minimal /dev, writable /tmp and /dev/shm, no host")
    func sandboxFileSystem() throws {
        let out = try Self.withDataDirectory { data in
            try Self.build([
                Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data, target: "/data"),
                Op(kind: XSB_MOUNT_FILE, source: "motd text", target: "/etc/motd"),
                Op(kind: XSB_MOUNT_SYMLINK, source: "/data", target: "/link"),
                Op(kind: XSB_MOUNT_TMPFS, target: "/scratch", size: 1 << 20),
                Op(kind: XSB_MOUNT_MASK, target: "/masked"),
                Op(kind: XSB_MOUNT_MASK, flags: Int32(XSB_MOUNT_F_DIRECTORY), target: "/empty"),
            ])
        }
        try #require(out.ranThrough && out.result == 0, "\(out.failure); grandchild status \(out.result)")
        var seen: [String: String] = [:]
        for line in out.report.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            seen[String(parts[0])] = parts.count > 1 ? String(parts[1].dropFirst()) : ""
        }
        seen["/dev"] = seen["/dev"].map { $0.split(separator: " ").sorted().joined(separator: " ") }
        let (ok, readOnly, missing) = ("ok", "\(EROFS)", "\(ENOENT)")
        #expect(seen == [
            "root read-only": ok, "mkdir /x": readOnly,
            "create /tmp/f": ok, "create /dev/shm/f": ok, "create /dev/f": readOnly,
            "write /dev/null": ok, "write /dev/full": "\(ENOSPC)",
            "write /proc/sys/kernel/hostname": readOnly, "/proc/1/status": ok,
            "/oldroot": missing, "/newroot": missing, "/work": missing,
            "/data/hello": "hi", "create /data/new": readOnly, "/etc/motd": "motd text", "/link/hello": "hi",
            "create /scratch/f": ok, "open /masked": "\(EACCES)", "create /empty/f": readOnly,
            "/dev": "fd full null random shm stderr stdin stdout urandom zero",
        ])
    }

    @Test("a directory on the way to a mask with more entries than are bound back one by one fails the step, naming it")
    func maskedDirectoryLimit() throws {
        let out = try Self.withDataDirectory { data -> xsbt_outcome in
            try FileManager.default.createDirectory(atPath: data + "/big", withIntermediateDirectories: false)
            for index in 0...4096 {
                let fd = open(data + "/big/\(index)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
                if fd >= 0 { close(fd) }
            }
            return try Self.build([
                Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data, target: "/data"),
                Op(kind: XSB_MOUNT_MASK, target: "/data/big/0"),
            ])
        }
        #expect(out.ranThrough && out.result == 1 << 8, "xsb_setup_mounts returned -1: \(out.failure); grandchild status \(out.result)")
        #expect(out.failed_step == Int32(XSB_STEP_BIND_MOUNT.rawValue) && out.failed_errno == E2BIG
                && out.detail == "over 4096 entries beside a mask in /data/big", "\(out.failure)")
    }

    struct Failure: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let step: xsb_step
        let errno: Int32
        let detail: String
    }

    @Test("a mount that cannot be made fails its step, naming it", arguments: [
        Failure(testDescription: "a bind source that does not exist", step: XSB_STEP_BIND_MOUNT, errno: ENOENT, detail: "source /nonexistent-xsbt"),
        Failure(testDescription: "a symlink on the way to a mount point", step: XSB_STEP_BIND_MOUNT, errno: ENOTDIR, detail: "mount point /l/x"),
        Failure(testDescription: "a file made twice", step: XSB_STEP_FILE_CREATE, errno: EEXIST, detail: "/etc/a"),
        Failure(testDescription: "a symlink on an existing file", step: XSB_STEP_SYMLINK, errno: EEXIST, detail: "/etc/a"),
    ])
    func failing(_ failure: Failure) throws {
        let out = try Self.withDataDirectory { data -> xsbt_outcome in
            let ops: [Op] = switch failure.step {
            case XSB_STEP_BIND_MOUNT where failure.errno == ENOENT:
                [Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: "/nonexistent-xsbt", target: "/data")]
            case XSB_STEP_BIND_MOUNT:
                [Op(kind: XSB_MOUNT_SYMLINK, source: "/tmp", target: "/l"), Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data, target: "/l/x")]
            case XSB_STEP_FILE_CREATE:
                [Op(kind: XSB_MOUNT_FILE, source: "a", target: "/etc/a"), Op(kind: XSB_MOUNT_FILE, source: "b", target: "/etc/a")]
            default:
                [Op(kind: XSB_MOUNT_FILE, source: "a", target: "/etc/a"), Op(kind: XSB_MOUNT_SYMLINK, source: "/x", target: "/etc/a")]
            }
            return try Self.build(ops)
        }
        #expect(out.ranThrough && out.result == 1 << 8, "xsb_setup_mounts returned -1: \(out.failure); grandchild status \(out.result)")
        #expect(out.failed_step == Int32(failure.step.rawValue) && out.failed_errno == failure.errno && out.detail == failure.detail, "\(out.failure)")
    }

    /// Another name of a masked file, or of a directory on the way to a mask, in the host tree
    /// of a bind that is bound back entry by entry: made in `data` by `make` (which returns what
    /// to undo). `data` holds `dir/secret` and `dir/sibling`; /data/dir/secret is masked.
    struct Alias: Sendable, CustomTestStringConvertible {
        let testDescription: String
        /// Also binds `data/dir` on its own at /data/dir (a bind nested in the masked one).
        var nested = false
        /// The masks (path, whether a directory), when not /data/dir/secret alone.
        var masks: [Mask]? = nil
        let make: @Sendable (_ data: String) -> (@Sendable () -> Void)
        /// The step's detail.
        let detail: String
    }

    struct Mask: Sendable {
        let path: String
        var directory = false
    }

    static func bindMount(_ source: String, _ target: String) -> @Sendable () -> Void {
        #expect(mkdir(target, 0o755) == 0 && mount(source, target, nil, UInt(MS_BIND), nil) == 0, "bind \(source) at \(target)")
        return { _ = umount2(target, Int32(MNT_DETACH)) }
    }

    @Test("an entry that opens a masked file, or a directory on the way to it, under another name fails the step, naming both",
          .enabled(if: getuid() == 0, "needs root: to bind a directory over another name on the host"),
          arguments: [
              Alias(testDescription: "a hard link of the masked file beside it", make: { data in
                  #expect(link(data + "/dir/secret", data + "/dir/alias") == 0)
                  return {}
              }, detail: "binding back beside a mask: /data/dir/alias is another name of /data/dir/secret"),
              Alias(testDescription: "a hard link of the masked file a level up", make: { data in
                  #expect(link(data + "/dir/secret", data + "/alias") == 0)
                  return {}
              }, detail: "binding back beside a mask: /data/alias is another name of /data/dir/secret"),
              Alias(testDescription: "a hard link of a symlink beside it, the masked path being the symlink", masks: [Mask(path: "/data/dir/link")], make: { data in
                  #expect(symlink("sibling", data + "/dir/link") == 0 && linkat(AT_FDCWD, data + "/dir/link", AT_FDCWD, data + "/dir/alias", 0) == 0)
                  return {}
              }, detail: "binding back beside a mask: /data/dir/alias is another name of /data/dir/link"),
              Alias(testDescription: "a bind mount of the directory on the way", make: { data in
                  MountTests.bindMount(data + "/dir", data + "/copy")
              }, detail: "binding back beside a mask: /data/copy is another name of /data/dir"),
              Alias(testDescription: "a bind mount of the directory on the way inside it", make: { data in
                  MountTests.bindMount(data + "/dir", data + "/dir/self")
              }, detail: "binding back beside a mask: /data/dir/self is another name of /data/dir"),
              Alias(testDescription: "a bind mount of the masked bind's own root", make: { data in
                  MountTests.bindMount(data, data + "/root")
              }, detail: "binding back beside a mask: /data/root is another name of /data"),
              Alias(testDescription: "a hard link of a file masked twice", masks: [Mask(path: "/data/dir/secret"), Mask(path: "/data/dir/secret")], make: { data in
                  #expect(link(data + "/dir/secret", data + "/dir/alias") == 0)
                  return {}
              }, detail: "binding back beside a mask: /data/dir/alias is another name of /data/dir/secret"),
              Alias(testDescription: "a directory on the way to one mask that is a bind mount of another, masked directory",
                    masks: [Mask(path: "/data/dir", directory: true), Mask(path: "/data/view/x")], make: { data in
                  MountTests.bindMount(data + "/dir", data + "/view")
              }, detail: "binding back beside a mask: /data/view is another name of /data/dir"),
              Alias(testDescription: "a bind mount of a directory that a nested bind shows as it is", nested: true, make: { data in
                  MountTests.bindMount(data + "/dir", data + "/copy")
              }, detail: "binding back beside a mask: /data/copy is another name of /data/dir"),
          ])
    func maskReachedUnderAnotherName(_ alias: Alias) throws {
        let out = try Self.withMaskedTree(alias)
        #expect(out.ranThrough && out.result == 1 << 8, "xsb_setup_mounts returned -1: \(out.failure); grandchild status \(out.result)")
        #expect(out.failed_step == Int32(XSB_STEP_BIND_MOUNT.rawValue) && out.failed_errno == EINVAL && out.detail == alias.detail, "\(out.failure)")
    }

    @Test("another name of a host directory that a nested bind from elsewhere replaces is no name of what the mask hides",
          .enabled(if: getuid() == 0, "needs root: to bind a directory over another name on the host"))
    func aliasOfReplacedDirectory() throws {
        let out = try Self.withDataDirectory { data -> xsbt_outcome in
            // Outside the masked bind's tree: /data shows no other name of it.
            let elsewhere = data + "-elsewhere"
            try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: false)
            defer { try? FileManager.default.removeItem(atPath: elsewhere) }
            try "SECRET".write(toFile: elsewhere + "/secret", atomically: false, encoding: .utf8)
            try FileManager.default.createDirectory(atPath: data + "/dir", withIntermediateDirectories: false)
            let undo = Self.bindMount(data + "/dir", data + "/copy")
            defer { undo() }
            return try Self.build([
                Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data, target: "/data"),
                Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: elsewhere, target: "/data/dir"),
                Op(kind: XSB_MOUNT_MASK, target: "/data/dir/secret"),
            ])
        }
        #expect(out.ranThrough && out.result == 0, "\(out.failure); detail \(out.detail); grandchild status \(out.result)")
    }

    @Test("two names of one directory, each on the way to a mask, are both split, with no false alarm",
          .enabled(if: getuid() == 0, "needs root: to bind a directory over another name on the host"))
    func twoNamesOfADirectoryOnTheWay() throws {
        let out = try Self.withDataDirectory { data -> xsbt_outcome in
            try FileManager.default.createDirectory(atPath: data + "/dir", withIntermediateDirectories: false)
            try "SECRET".write(toFile: data + "/dir/secret", atomically: false, encoding: .utf8)
            let undo = Self.bindMount(data + "/dir", data + "/copy")
            defer { undo() }
            return try Self.build([
                Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data, target: "/data"),
                Op(kind: XSB_MOUNT_MASK, target: "/data/dir/secret"),
                Op(kind: XSB_MOUNT_MASK, target: "/data/copy/secret"),
            ])
        }
        #expect(out.ranThrough && out.result == 0, "\(out.failure); detail \(out.detail); grandchild status \(out.result)")
    }

    static func withMaskedTree(_ alias: Alias) throws -> xsbt_outcome {
        try withDataDirectory { data -> xsbt_outcome in
            try FileManager.default.createDirectory(atPath: data + "/dir", withIntermediateDirectories: false)
            try "SECRET".write(toFile: data + "/dir/secret", atomically: false, encoding: .utf8)
            try "SIB".write(toFile: data + "/dir/sibling", atomically: false, encoding: .utf8)
            let undo = alias.make(data)
            defer { undo() }
            let masks = alias.masks ?? [Mask(path: "/data/dir/secret")]
            var ops = [Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data, target: "/data")]
            if alias.nested { ops.append(Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data + "/dir", target: "/data/dir")) }
            for mask in masks { ops.append(Op(kind: XSB_MOUNT_MASK, flags: mask.directory ? Int32(XSB_MOUNT_F_DIRECTORY) : 0, target: mask.path)) }
            return try build(ops)
        }
    }
}
