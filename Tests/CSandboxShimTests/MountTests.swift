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

    /// Another name of a masked file, or of a directory on the way to a mask, in a directory
    /// bound back beside the mask: made in `data` by `make` (which returns what to undo).
    struct Alias: Sendable, CustomTestStringConvertible {
        let testDescription: String
        /// Also binds the directory on the way to the mask on its own (a bind nested in the masked one).
        var nested = false
        let make: @Sendable (_ data: String) -> (@Sendable () -> Void)
        let detail: String
    }

    @Test("an entry beside a mask that opens the masked file, or a directory on the way to it, under another name fails the step, naming both",
          .enabled(if: getuid() == 0, "needs root: to bind a directory over another name on the host"),
          arguments: [
              Alias(testDescription: "a hard link of the masked file", make: { data in
                  #expect(link(data + "/dir/secret", data + "/dir/alias") == 0)
                  return {}
              }, detail: "binding back beside a mask: /data/dir/alias opens what the policy's /data/dir/secret opens (another spelling of the name, a hard link or a bind mount)"),
              Alias(testDescription: "a bind mount of the directory on the way", make: { data in
                  #expect(mkdir(data + "/copy", 0o755) == 0 && mount(data + "/dir", data + "/copy", nil, UInt(MS_BIND), nil) == 0)
                  return { _ = umount2(data + "/copy", Int32(MNT_DETACH)) }
              }, detail: "binding back beside a mask: /data/copy opens what the policy's /data/dir opens (another spelling of the name, a hard link or a bind mount)"),
              Alias(testDescription: "a bind mount of a directory that a nested bind shows", nested: true, make: { data in
                  #expect(mkdir(data + "/copy", 0o755) == 0 && mount(data + "/dir", data + "/copy", nil, UInt(MS_BIND), nil) == 0)
                  return { _ = umount2(data + "/copy", Int32(MNT_DETACH)) }
              }, detail: "binding back beside a mask: /data/copy opens what the policy's /data/dir opens (another spelling of the name, a hard link or a bind mount)"),
          ])
    func maskReachedUnderAnotherName(_ alias: Alias) throws {
        let out = try Self.withDataDirectory { data -> xsbt_outcome in
            try FileManager.default.createDirectory(atPath: data + "/dir", withIntermediateDirectories: false)
            try "SECRET".write(toFile: data + "/dir/secret", atomically: false, encoding: .utf8)
            let undo = alias.make(data)
            defer { undo() }
            var ops = [Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data, target: "/data")]
            if alias.nested { ops.append(Op(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: data + "/dir", target: "/data/dir")) }
            ops.append(Op(kind: XSB_MOUNT_MASK, target: "/data/dir/secret"))
            return try Self.build(ops)
        }
        #expect(out.ranThrough && out.result == 1 << 8, "xsb_setup_mounts returned -1: \(out.failure); grandchild status \(out.result)")
        #expect(out.failed_step == Int32(XSB_STEP_BIND_MOUNT.rawValue) && out.failed_errno == EINVAL && out.detail == alias.detail, "\(out.failure)")
    }
}
