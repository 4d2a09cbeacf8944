import CMechanismSupport
import CSandboxShim
import Glibc
@testable import SandboxRuntime
import Testing

/// launch_description.c: what `xsb_description_create` writes, `xsb_description_load` reads back
/// field for field; every kind of damage is refused with its own reason.
///
/// Serialized: the loader keeps its mapping and its refusal in static memory (it runs once per
/// init); this suite is the only caller in the test process.
@Suite("Launch description: written, loaded, refused", .serialized)
struct LaunchDescriptionTests {
    struct Mount: Equatable {
        var kind: xsb_mount_kind
        var flags: Int32 = 0
        /// A string, or a file's bytes.
        var source: [UInt8]
        var target: String
        var size: UInt64 = 0
        var mode: UInt32 = 0
        var tree: Int32 = 0
    }

    struct Limit: Equatable {
        var resource: Int32, soft: UInt64, hard: UInt64
    }

    /// Every field of a launch description, as values.
    struct Fields: Equatable {
        var path = "/usr/bin/tool"
        var argv = ["tool", "--flag", ""]
        var envp = ["A=b", "PATH=/usr/bin"]
        var cwd = "/work"
        var hostname = "box"
        var uidOutside: UInt32 = 65534, gidOutside: UInt32 = 65533, uidInside: UInt32 = 1000, gidInside: UInt32 = 1001
        var mounts: [Mount] = [
            Mount(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_WRITABLE | XSB_MOUNT_F_DIRECTORY), source: Array("/usr".utf8), target: "/usr"),
            Mount(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_TREE | XSB_MOUNT_F_DIRECTORY | XSB_MOUNT_F_NOEXEC),
                  source: Array("/home/u/bundle".utf8), target: "/bundle", tree: 0),
            Mount(kind: XSB_MOUNT_TMPFS, source: [], target: "/scratch", size: 1 << 20, mode: 0o1777),
            Mount(kind: XSB_MOUNT_SYMLINK, source: Array("usr/lib".utf8), target: "/lib"),
            Mount(kind: XSB_MOUNT_FILE, source: Array("hello\0world".utf8), target: "/etc/motd", size: 11, mode: 0o644),
            Mount(kind: XSB_MOUNT_MASK, flags: Int32(XSB_MOUNT_F_DIRECTORY), source: [], target: "/proc/acpi"),
        ]
        var tmpSize: UInt64 = 8 << 20
        var rlimits = [Limit(resource: Int32(XSB_RLIMIT_NOFILE), soft: 64, hard: 128), Limit(resource: Int32(XSB_RLIMIT_CORE), soft: 0, hard: 0)]
        var bpf: [UInt8] = [0x06, 0, 0, 0, 0, 0, 0xff, 0x7f, 0x06, 0, 0, 0, 0, 0, 0, 0]  // RET ALLOW; RET KILL
        var stdio: [Int32] = [-1, 10, 11]
        var extraFds: [Int32] = [12, 13]
        var cgroupTasksFds: [Int32] = [-1, 14, -1, -1]
        var execFd: Int32 = 15
        var mountTrees: [Int32] = [16]
        var superviseFirstExec: Int32 = 1, audit: Int32 = 0, memoryDenyWriteExecute: Int32 = 1, controllingTerminal: Int32 = 1
        var capLastCap: Int32 = 40
        var cgroupDirectoryFd: Int32 = 20, initFd: Int32 = 21

        /// The config these fields describe (its memory in `arena`).
        func config(in arena: CArena) -> xsb_spawn_config {
            var config = xsb_spawn_config()
            config.path = UnsafePointer(arena.string(path))
            config.argv = UnsafePointer(arena.stringArray(argv))
            config.envp = UnsafePointer(arena.stringArray(envp))
            config.cwd = UnsafePointer(arena.string(cwd))
            config.hostname = UnsafePointer(arena.string(hostname))
            (config.uid_outside, config.gid_outside, config.uid_inside, config.gid_inside) = (uidOutside, gidOutside, uidInside, gidInside)
            let ops = arena.array(of: xsb_mount_op.self, count: mounts.count)
            for (index, mount) in mounts.enumerated() {
                ops[index] = xsb_mount_op(kind: Int32(mount.kind.rawValue), flags: mount.flags,
                                          source: UnsafePointer(arena.bytes(mount.source + [0])), target: UnsafePointer(arena.string(mount.target)),
                                          size: mount.size, mode: mount.mode, tree: mount.tree)
            }
            config.mounts = UnsafePointer(ops)
            config.mount_count = mounts.count
            let trees = arena.array(of: Int32.self, count: mountTrees.count)
            for (index, fd) in mountTrees.enumerated() { trees[index] = fd }
            config.mount_trees = UnsafePointer(trees)
            config.mount_tree_count = mountTrees.count
            config.tmp_size = tmpSize
            let limits = arena.array(of: xsb_rlimit.self, count: rlimits.count)
            for (index, limit) in rlimits.enumerated() { limits[index] = xsb_rlimit(resource: limit.resource, soft: limit.soft, hard: limit.hard) }
            config.rlimits = UnsafePointer(limits)
            config.rlimit_count = rlimits.count
            config.bpf = UnsafeRawPointer(arena.bytes(bpf))
            config.bpf_instructions = bpf.count / 8
            config.stdio = (stdio[0], stdio[1], stdio[2])
            let extra = arena.array(of: Int32.self, count: extraFds.count)
            for (index, fd) in extraFds.enumerated() { extra[index] = fd }
            config.extra_fds = UnsafePointer(extra)
            config.extra_fd_count = extraFds.count
            config.exec_fd = execFd
            config.cgroup_tasks_fds = (cgroupTasksFds[0], cgroupTasksFds[1], cgroupTasksFds[2], cgroupTasksFds[3])
            config.cgroup_directory_fd = cgroupDirectoryFd
            config.supervise_first_exec = superviseFirstExec
            config.audit = audit
            config.memory_deny_write_execute = memoryDenyWriteExecute
            config.controlling_terminal = controllingTerminal
            config.cap_last_cap = capLastCap
            config.setup_timeout_ms = 5000
            config.init_fd = initFd
            return config
        }

        /// The fields a loaded config holds.
        init(loaded config: xsb_spawn_config) {
            func strings(_ list: UnsafePointer<UnsafeMutablePointer<CChar>?>?) -> [String] {
                var result: [String] = []
                while let list, let item = list[result.count] { result.append(String(cString: item)) }
                return result
            }
            path = String(cString: config.path)
            argv = strings(config.argv)
            envp = strings(config.envp)
            cwd = String(cString: config.cwd)
            hostname = String(cString: config.hostname)
            (uidOutside, gidOutside, uidInside, gidInside) = (config.uid_outside, config.gid_outside, config.uid_inside, config.gid_inside)
            mounts = (0..<config.mount_count).map { index in
                let op = config.mounts[index]
                let source = op.kind == Int32(XSB_MOUNT_FILE.rawValue)
                    ? Array(UnsafeRawBufferPointer(start: op.source, count: Int(op.size)))
                    : Array(String(cString: op.source).utf8)
                return Mount(kind: xsb_mount_kind(UInt32(op.kind)), flags: op.flags, source: source, target: String(cString: op.target),
                             size: op.size, mode: op.mode, tree: op.tree)
            }
            tmpSize = config.tmp_size
            rlimits = (0..<config.rlimit_count).map { Limit(resource: config.rlimits[$0].resource, soft: config.rlimits[$0].soft, hard: config.rlimits[$0].hard) }
            bpf = Array(UnsafeRawBufferPointer(start: config.bpf, count: config.bpf_instructions * 8))
            stdio = [config.stdio.0, config.stdio.1, config.stdio.2]
            extraFds = (0..<config.extra_fd_count).map { config.extra_fds[$0] }
            cgroupTasksFds = [config.cgroup_tasks_fds.0, config.cgroup_tasks_fds.1, config.cgroup_tasks_fds.2, config.cgroup_tasks_fds.3]
            execFd = config.exec_fd
            mountTrees = (0..<config.mount_tree_count).map { config.mount_trees[$0] }
            superviseFirstExec = config.supervise_first_exec
            audit = config.audit
            memoryDenyWriteExecute = config.memory_deny_write_execute
            controllingTerminal = config.controlling_terminal
            capLastCap = config.cap_last_cap
            cgroupDirectoryFd = config.cgroup_directory_fd
            initFd = config.init_fd
        }

        init() {}
    }

    /// A written description: its bytes and the host fds it passes, in order.
    static func write(_ fields: Fields) throws -> (bytes: [UInt8], passed: [Int32]) {
        let arena = CArena()
        var config = fields.config(in: arena)
        var passed = xsb_passed_fds()
        var fd: Int32 = -1
        try #require(xsb_description_create(&config, &passed, &fd) == 0, "errno \(errno)")
        defer { close(fd) }
        var info = stat()
        fstat(fd, &info)
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        #expect(pread(fd, &bytes, bytes.count, 0) == bytes.count)
        #expect(fcntl(fd, 1034) == 0xf, "sealed: SEAL, SHRINK, GROW, WRITE")  // F_GET_SEALS
        let hosts = withUnsafeBytes(of: passed.host) { Array($0.bindMemory(to: Int32.self).prefix(Int(passed.count))) }
        return (bytes, hosts)
    }

    /// What the init makes of `bytes` in a memfd with `seals`: the fields, or why it refused.
    static func load(_ bytes: [UInt8], seals: UInt32 = 0xf) -> Result<Fields, Refusal> {
        let fd = bytes.withUnsafeBytes { xsbt_memfd($0.baseAddress, $0.count, seals) }
        defer { close(fd) }
        var config = xsb_spawn_config()
        var what: UnsafePointer<CChar>?
        defer { xsb_description_unload() }
        if xsb_description_load(fd, &config, &what) != 0 {
            return .failure(Refusal(reason: what.map { String(cString: $0) } ?? "(no reason)", errno: errno))
        }
        return .success(Fields(loaded: config))
    }

    struct Refusal: Error, Equatable {
        let reason: String
        let errno: Int32
    }

    @Test("every field comes back as written; the fds as the init's numbers for them")
    func roundTrip() throws {
        let written = Fields()
        let (bytes, passed) = try Self.write(written)
        #expect(passed == [10, 11, 12, 13, 14, 15, 16], "stdio, extra fds, cgroup tasks files, the program, the detached mounts")
        var expected = written
        // The init finds the passed fds from 2 on, in that order; what is not passed stays -1.
        expected.stdio = [-1, 2, 3]
        expected.extraFds = [4, 5]
        expected.cgroupTasksFds = [-1, 6, -1, -1]
        expected.execFd = 7
        expected.mountTrees = [8]
        // Only a detached bind has a tree; the supervisor's own fds are not the init's.
        for index in expected.mounts.indices where index != 1 { expected.mounts[index].tree = -1 }
        expected.cgroupDirectoryFd = -1
        expected.initFd = -1
        #expect(try Self.load(bytes).get() == expected)

        var bare = Fields()
        (bare.argv, bare.envp, bare.mounts, bare.rlimits) = (["only"], [], [], [])
        (bare.stdio, bare.extraFds, bare.cgroupTasksFds, bare.execFd, bare.mountTrees) = ([-1, -1, -1], [], [-1, -1, -1, -1], -1, [])
        (bare.superviseFirstExec, bare.audit, bare.memoryDenyWriteExecute, bare.controllingTerminal) = (0, 1, 0, 0)
        (bare.cgroupDirectoryFd, bare.initFd) = (-1, -1)
        let (bareBytes, barePassed) = try Self.write(bare)
        #expect(barePassed.isEmpty)
        #expect(try Self.load(bareBytes).get() == bare)
    }

    /// The header's fields at their offsets (struct xsb_wire_header in launch_description.c);
    /// `layoutMatches` checks them against a written description before any case relies on them.
    enum Header {
        static let magic = 0, version = 4, size = 8, path = 16, cwd = 32, hostname = 48, argv = 64, envp = 80
        static let mounts = 96, rlimits = 112, bpf = 128, passedFdCount = 168, stdio = 172, extraFdCount = 184
        static let extraFds = 188, cgroupTasksFds = 316, audit = 336, capLastCap = 348, execFd = 352
        static let mountTreeCount = 356, mountTrees = 360
        /// struct xsb_wire_mount: kind, flags, source, target, size, mode, tree.
        static let mountSize = 56, mountKind = 0, mountFlags = 4, mountSourceLength = 16, mountSize_ = 40, mountMode = 48, mountTree = 52
    }

    /// Bytes of a description, patched in place.
    struct Bytes {
        var bytes: [UInt8]
        func u64(_ at: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(bytes[at + $1]) << (8 * $1) } }
        func i32(_ at: Int) -> Int32 { Int32(bitPattern: UInt32(truncatingIfNeeded: (0..<4).reduce(0) { $0 | UInt64(bytes[at + $1]) << (8 * $1) })) }
        mutating func set(_ at: Int, u64 value: UInt64) { for i in 0..<8 { bytes[at + i] = UInt8(truncatingIfNeeded: value >> (8 * i)) } }
        mutating func set(_ at: Int, i32 value: Int32) { for i in 0..<4 { bytes[at + i] = UInt8(truncatingIfNeeded: UInt32(bitPattern: value) >> (8 * i)) } }
        /// Where mount `index` is.
        func mount(_ index: Int) -> Int { Int(u64(Header.mounts)) + index * Header.mountSize }
    }

    @Test("the header's layout is the one the damage cases patch")
    func layoutMatches() throws {
        let fields = Fields()
        let written = Bytes(bytes: try Self.write(fields).bytes)
        #expect(written.i32(Header.magic) == 0x4c42_5358 && written.i32(Header.version) == XSB_LAUNCH_FORMAT_VERSION)
        #expect(written.u64(Header.size) == UInt64(written.bytes.count))
        #expect(written.u64(Header.argv + 8) == UInt64(fields.argv.count * 16))
        #expect(written.u64(Header.mounts + 8) == UInt64(fields.mounts.count * Header.mountSize))
        #expect(written.u64(Header.bpf + 8) == UInt64(fields.bpf.count))
        #expect(written.i32(Header.passedFdCount) == 7 && written.i32(Header.stdio) == -1 && written.i32(Header.stdio + 4) == 2)
        #expect(written.i32(Header.extraFdCount) == 2 && written.i32(Header.extraFds + 4) == 5)
        #expect(written.i32(Header.cgroupTasksFds + 4) == 6 && written.i32(Header.execFd) == 7)
        #expect(written.i32(Header.capLastCap) == 40 && written.i32(Header.mountTreeCount) == 1 && written.i32(Header.mountTrees) == 8)
        #expect(written.i32(written.mount(4) + Header.mountKind) == Int32(XSB_MOUNT_FILE.rawValue))
        #expect(written.u64(written.mount(4) + Header.mountSize_) == 11 && written.i32(written.mount(4) + Header.mountMode) == 0o644)
        #expect(written.i32(written.mount(1) + Header.mountTree) == 0 && written.i32(written.mount(0) + Header.mountTree) == -1)
    }

    /// One kind of damage and the reason the init gives for refusing it.
    struct Damage: Sendable, CustomTestStringConvertible {
        let testDescription: String
        var fields: @Sendable (inout Fields) -> Void = { _ in }
        var bytes: @Sendable (inout Bytes) -> Void = { _ in }
        var seals: UInt32 = 0xf
        let reason: String
        var errno: Int32 = EINVAL
    }

    static let damages: [Damage] = [
        // The memfd itself.
        Damage(testDescription: "not sealed", seals: 0, reason: "not sealed", errno: EPERM),
        Damage(testDescription: "sealed but still writable", seals: 0x7, reason: "not sealed", errno: EPERM),
        Damage(testDescription: "shorter than a header", bytes: { $0.bytes = Array($0.bytes.prefix(40)) }, reason: "not a description (type or size)"),
        Damage(testDescription: "bad magic", bytes: { $0.set(Header.magic, i32: 0x1234_5678) }, reason: "bad magic"),
        Damage(testDescription: "another version", bytes: { $0.set(Header.version, i32: XSB_LAUNCH_FORMAT_VERSION + 1) },
               reason: "another version (the sandbox init and the supervisor come from different builds)"),
        Damage(testDescription: "size other than the file's", bytes: { $0.set(Header.size, u64: $0.u64(Header.size) - 8) }, reason: "size"),
        // Offsets and lengths.
        Damage(testDescription: "path offset past the end", bytes: { $0.set(Header.path, u64: UInt64($0.bytes.count)) }, reason: "program path"),
        Damage(testDescription: "path offset that overflows", bytes: { $0.set(Header.path, u64: .max - 4) }, reason: "program path"),
        Damage(testDescription: "path without its terminator", bytes: { $0.set(Header.path + 8, u64: $0.u64(Header.path + 8) - 1) }, reason: "program path"),
        Damage(testDescription: "path with a NUL inside", bytes: { $0.bytes[Int($0.u64(Header.path)) + 4] = 0 }, reason: "program path"),
        Damage(testDescription: "relative path", fields: { $0.path = "usr/bin/tool" }, reason: "program path"),
        Damage(testDescription: "working directory past the end", bytes: { $0.set(Header.cwd + 8, u64: .max) }, reason: "working directory"),
        Damage(testDescription: "relative working directory", fields: { $0.cwd = "work" }, reason: "working directory"),
        Damage(testDescription: "empty hostname", fields: { $0.hostname = "" }, reason: "hostname"),
        Damage(testDescription: "hostname of 65 bytes", fields: { $0.hostname = String(repeating: "h", count: 65) }, reason: "hostname"),
        Damage(testDescription: "arguments misaligned", bytes: { $0.set(Header.argv, u64: $0.u64(Header.argv) + 4) }, reason: "arguments"),
        Damage(testDescription: "arguments of part of an entry", bytes: { $0.set(Header.argv + 8, u64: 17) }, reason: "arguments"),
        Damage(testDescription: "an argument past the end", bytes: { $0.set(Int($0.u64(Header.argv)), u64: UInt64($0.bytes.count)) }, reason: "arguments"),
        Damage(testDescription: "no arguments", fields: { $0.argv = [] }, reason: "no arguments (argv[0])"),
        Damage(testDescription: "environment of part of an entry", bytes: { $0.set(Header.envp + 8, u64: 8) }, reason: "environment"),
        // Counts and values of the mounts.
        Damage(testDescription: "mounts of part of an entry", bytes: { $0.set(Header.mounts + 8, u64: $0.u64(Header.mounts + 8) - 1) }, reason: "mount list"),
        Damage(testDescription: "mounts past the end", bytes: { $0.set(Header.mounts, u64: UInt64($0.bytes.count)) }, reason: "mount list"),
        Damage(testDescription: "bad mount kind", bytes: { $0.set($0.mount(0) + Header.mountKind, i32: 9) }, reason: "a mount's kind"),
        Damage(testDescription: "mount kind 0", fields: { $0.mounts[2].kind = xsb_mount_kind(0) }, reason: "a mount's kind"),
        Damage(testDescription: "device flag", bytes: { $0.set($0.mount(0) + Header.mountFlags, i32: Int32(XSB_MOUNT_F_DEVICE)) }, reason: "a mount's flags or mode"),
        Damage(testDescription: "unknown flag", bytes: { $0.set($0.mount(0) + Header.mountFlags, i32: 1 << 9) }, reason: "a mount's flags or mode"),
        Damage(testDescription: "mode beyond 07777", bytes: { $0.set($0.mount(4) + Header.mountMode, i32: 0o10644) }, reason: "a mount's flags or mode"),
        Damage(testDescription: "relative mount target", fields: { $0.mounts[2].target = "scratch" }, reason: "a mount's target"),
        Damage(testDescription: "relative bind source", fields: { $0.mounts[0].source = Array("usr".utf8) }, reason: "a mount's source"),
        Damage(testDescription: "empty symlink text", fields: { $0.mounts[3].source = [] }, reason: "a mount's source"),
        Damage(testDescription: "detached source the header does not list", bytes: { $0.set($0.mount(1) + Header.mountTree, i32: 1) },
               reason: "a mount's detached source"),
        Damage(testDescription: "tree index on a bind that is not detached", bytes: { $0.set($0.mount(0) + Header.mountTree, i32: 0) },
               reason: "a mount's detached source"),
        Damage(testDescription: "file contents of another size", bytes: { $0.set($0.mount(4) + Header.mountSize_, u64: 12) }, reason: "a file's contents"),
        // Resource limits and the filter.
        Damage(testDescription: "limits of part of an entry", bytes: { $0.set(Header.rlimits + 8, u64: 23) }, reason: "resource limits"),
        Damage(testDescription: "unknown resource", fields: { $0.rlimits[0].resource = 99 }, reason: "a resource limit"),
        Damage(testDescription: "negative resource", fields: { $0.rlimits[1].resource = -1 }, reason: "a resource limit"),
        Damage(testDescription: "soft limit above the hard one", fields: { $0.rlimits[0].soft = 129 }, reason: "a resource limit"),
        Damage(testDescription: "no filter", fields: { $0.bpf = [] }, reason: "seccomp filter"),
        Damage(testDescription: "filter of part of an instruction", bytes: { $0.set(Header.bpf + 8, u64: 12) }, reason: "seccomp filter"),
        // File descriptors: each one a passed fd (2 ..< 2 + count) or -1.
        Damage(testDescription: "stdio fd past the passed ones", bytes: { $0.set(Header.stdio, i32: 2 + 7) }, reason: "file descriptors"),
        Damage(testDescription: "stdio fd that is the description", bytes: { $0.set(Header.stdio, i32: 1) }, reason: "file descriptors"),
        Damage(testDescription: "extra fd of -1", bytes: { $0.set(Header.extraFds, i32: -1) }, reason: "file descriptors"),
        Damage(testDescription: "more extra fds than there are", bytes: { $0.set(Header.extraFdCount, i32: 33) }, reason: "file descriptors"),
        Damage(testDescription: "negative passed count", bytes: { $0.set(Header.passedFdCount, i32: -1) }, reason: "file descriptors"),
        Damage(testDescription: "cgroup tasks fd out of range", bytes: { $0.set(Header.cgroupTasksFds, i32: 100) }, reason: "file descriptors"),
        Damage(testDescription: "program fd out of range", bytes: { $0.set(Header.execFd, i32: -2) }, reason: "file descriptors"),
        Damage(testDescription: "detached mount of -1", bytes: { $0.set(Header.mountTrees, i32: -1) }, reason: "file descriptors"),
        // Flags and the last capability.
        Damage(testDescription: "a flag of 2", bytes: { $0.set(Header.audit, i32: 2) }, reason: "flags"),
        Damage(testDescription: "cap_last_cap of 64", fields: { $0.capLastCap = 64 }, reason: "cap_last_cap"),
        Damage(testDescription: "negative cap_last_cap", fields: { $0.capLastCap = -1 }, reason: "cap_last_cap"),
    ]

    @Test("damage is refused with its reason", arguments: damages)
    func refused(_ damage: Damage) throws {
        var fields = Fields()
        damage.fields(&fields)
        var bytes = Bytes(bytes: try Self.write(fields).bytes)
        damage.bytes(&bytes)
        #expect(Self.load(bytes.bytes, seals: damage.seals) == .failure(Refusal(reason: "launch description: " + damage.reason, errno: damage.errno)))
    }
}
