import CSandboxShim
import Foundation
import Glibc
import SandboxPolicy
@testable import SandboxRuntime
import SandboxSystem
import TestSupport
import Testing

/// The sandbox init is `xsb-init`, a small static program of its own (issue 14, "launch cost
/// grows with the host's size" and "the host's memory leaks into every sandbox"): found and
/// checked like a policy, exec'd by fd, fed a launch description it checks before it uses.
@Suite("Sandbox init", .offThePool)
struct SandboxInitTests {
    static var initPath: String { TestPaths.product("xsb-init") }

    /// `key: value` of /proc/PID/status.
    static func status(_ pid: pid_t, _ key: String) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
            return line.dropFirst(key.count + 1).trimmingCharacters(in: .whitespaces)
        }
        return nil
    }

    @Test("every sandbox's init is xsb-init, holding nothing of a large host's memory")
    func initHoldsNothingOfTheHost() async throws {
        // A host with 64 MiB of heap in use: a clone of it would hold (and show) all of it.
        let heapBytes = 64 << 20
        let heap = UnsafeMutableRawPointer.allocate(byteCount: heapBytes, alignment: 4096)
        defer { heap.deallocate() }
        memset(heap, 0x5a, heapBytes)
        // The sandbox's program must still run while the init is inspected; on a machine loaded by
        // other tests it has been seen to end early (the init then is a zombie): try again, and say why.
        var endings: [String] = []
        for _ in 0..<3 {
            let process = try await Supervisor.shared.launch(try Fixtures.probeConfiguration(["sleep", "600"]))
            defer { process.kill() }
            let exe = SystemFiles.linkTarget("/proc/\(process.pid)/exe")
            let size = Self.status(process.pid, "VmSize").flatMap { Int($0.split(separator: " ")[0]) }
            let rss = Self.status(process.pid, "VmRSS").flatMap { Int($0.split(separator: " ")[0]) }
            let cmdline = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(process.pid)/cmdline"))
            guard let exe, let size, let rss, let cmdline, process.isRunning else {
                process.kill()
                endings.append("\(await process.waitForExit())")
                continue
            }
            #expect(exe == SystemFiles.realPath(Self.initPath), "the sandbox's PID 1 runs \(exe)")
            #expect(size < 16 * 1024, "the init maps \(size) KiB")
            #expect(rss < 4 * 1024, "the init holds \(rss) KiB")
            #expect(Self.status(process.pid, "Name") == "xsb-init")
            #expect(cmdline == Data("xsb-init\0".utf8))
            return
        }
        Issue.record("the sandbox's program ended before its init could be inspected, 3 times: \(endings)")
    }

    @Test("the init is looked for next to the executable, then in the install's libexec, unless named")
    func candidates() {
        let found = InitExecutable.candidates(executablePath: "/opt/x/bin/host", explicit: nil)
        #expect(found == ["/opt/x/bin/xsb-init", "/opt/x/libexec/extsandbox/xsb-init",
                          "/usr/local/libexec/extsandbox/xsb-init", "/usr/libexec/extsandbox/xsb-init"])
        #expect(InitExecutable.candidates(executablePath: "/opt/x/bin/host", explicit: "/dev/xsb-init") == ["/dev/xsb-init"])
        #expect(InitExecutable.candidates(executablePath: "/usr/bin/extsandbox", explicit: "").count == 3)
    }

    @Test("an init others could have written, or none at all, fails the launch naming the paths")
    func untrustedOrMissingInit() async throws {
        let directory = try TestPaths.makePolicyDirectory("init").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let copy = directory + "/xsb-init"
        // Written through a close-on-exec descriptor: a copy's write descriptor inherited by a
        // process another test starts meanwhile would make its exec fail (ETXTBSY).
        try Fixtures.writeFile(copy, Array(try #require(FileManager.default.contents(atPath: Self.initPath))), mode: 0o775)
        var environment = TestPaths.environmentWithPolicies()
        environment["EXTSANDBOX_INIT"] = copy
        let refused = try await Fixtures.run([Fixtures.cli, "exec", "--", "/bin/true"], environment: environment)
        #expect(refused.status == 125, "\(refused.stderr)")
        #expect(refused.stderr.contains("cannot use the sandbox init \(copy)") && refused.stderr.contains("writable by its group"),
                "\(refused.stderr)")

        chmod(copy, 0o755)
        let trusted = try await Fixtures.run([Fixtures.cli, "exec", "--", "/bin/true"], environment: environment)
        #expect(trusted.status == 0, "a copy that passes the checks runs: \(trusted.stderr)")

        environment["EXTSANDBOX_INIT"] = directory + "/missing"
        let missing = try await Fixtures.run([Fixtures.cli, "exec", "--", "/bin/true"], environment: environment)
        #expect(missing.status == 125, "\(missing.stderr)")
        #expect(missing.stderr.contains("looked for \(directory)/missing (missing)") && missing.stderr.contains("EXTSANDBOX_INIT"),
                "\(missing.stderr)")
    }

    // MARK: The launch description, as the init reads it

    /// A mount operation added to a description as given, past MountPlan's checks.
    struct RawMount {
        var kind: xsb_mount_kind
        var flags: Int32 = 0
        var source: String
        var target: String
    }

    /// A valid description of a small launch (what xsb_spawn_start writes), as bytes; with `extra`,
    /// one that also carries those mount operations unchecked.
    static func validDescription(extra: [RawMount] = []) throws -> [UInt8] {
        let arena = CArena()
        var config = xsb_spawn_config()
        config.path = UnsafePointer(arena.string("/bin/true"))
        config.argv = UnsafePointer(arena.stringArray(["true", "x"]))
        config.envp = UnsafePointer(arena.stringArray(["A=b"]))
        config.cwd = UnsafePointer(arena.string("/"))
        config.hostname = UnsafePointer(arena.string("extsandbox"))
        var plan = try MountPlan(policy: try Fixtures.standardPolicy(), extraMounts: [], hostname: "extsandbox", uid: 1000, gid: 1000)
        plan.append(.file(target: "/etc/motd", contents: "hello\0world"))
        let (planned, plannedCount) = plan.cOperations(in: arena)
        let count = plannedCount + extra.count
        let ops = arena.array(of: xsb_mount_op.self, count: count)
        for index in 0..<plannedCount { ops[index] = planned[index] }
        for (index, mount) in extra.enumerated() {
            var op = xsb_mount_op()
            op.kind = Int32(mount.kind.rawValue)
            op.flags = mount.flags
            op.source = UnsafePointer(arena.string(mount.source))
            op.target = UnsafePointer(arena.string(mount.target))
            op.size = mount.kind == XSB_MOUNT_FILE ? UInt64(mount.source.utf8.count) : 1 << 20
            ops[plannedCount + index] = op
        }
        config.mounts = UnsafePointer(ops)
        config.mount_count = count
        let bpf = arena.bytes([0x06, 0, 0, 0, 0, 0, 0xff, 0x7f])  // RET ALLOW
        config.bpf = UnsafeRawPointer(bpf)
        config.bpf_instructions = 1
        config.stdio = (-1, 1, 2)
        config.cgroup_tasks_fds = (-1, -1, -1, -1)
        config.exec_fd = -1
        config.cap_last_cap = 40
        var passed = xsb_passed_fds()
        var fd: Int32 = -1
        try #require(xsb_description_create(&config, &passed, &fd) == 0)
        defer { close(fd) }
        #expect(passed.count == 2)
        var info = stat()
        fstat(fd, &info)
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        #expect(pread(fd, &bytes, bytes.count, 0) == bytes.count)
        return bytes
    }

    /// A memfd holding `bytes`, sealed as the supervisor seals it (unless `seal` is false).
    static func memfd(_ bytes: [UInt8], seal: Bool = true) -> Int32 {
        // glibc's memfd_create needs _GNU_SOURCE, which the Glibc module is not built with.
        typealias MemfdCreate = @convention(c) (UnsafePointer<CChar>, UInt32) -> Int32
        let memfdCreate = unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "memfd_create"), to: MemfdCreate.self)
        let fd = memfdCreate("test", 0x0001 | 0x0002)  // MFD_CLOEXEC | MFD_ALLOW_SEALING
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if seal { _ = fcntl(fd, 1033, Int32(0x1 | 0x2 | 0x4 | 0x8)) }  // F_ADD_SEALS: SEAL, SHRINK, GROW, WRITE
        return fd
    }

    /// Runs xsb-init outside any sandbox with `description` as its fd 1 and a socket as fd 0
    /// (and a passed fd 2 and 3, as the description says). Returns the ERROR it reported (nil when it
    /// accepted the description and waited for GO) and how it ended.
    static func runInit(description: Int32) async throws -> (error: xsb_msg?, status: Int32) {
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pair[1], 0)
        posix_spawn_file_actions_adddup2(&actions, description, 1)
        posix_spawn_file_actions_adddup2(&actions, 2, 2)
        posix_spawn_file_actions_adddup2(&actions, 2, 3)
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("xsb-init"), nil]
        defer { free(argv[0]) }
        let empty: [UnsafeMutablePointer<CChar>?] = [nil]
        try #require(posix_spawn(&pid, initPath, &actions, nil, argv, empty) == 0)
        close(pair[1])
        let socket = pair[0], spawned = pid
        // Up to 2 s of waiting: on a thread of its own (see offThePool).
        return await offThePool { () -> (error: xsb_msg?, status: Int32) in
            var message = xsb_msg()
            var poller = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            var error: xsb_msg?
            // A refusal comes at once; an accepted description leaves the init waiting for GO.
            if poll(&poller, 1, 2000) == 1, recv(socket, &message, MemoryLayout<xsb_msg>.size, 0) == MemoryLayout<xsb_msg>.size {
                error = message
            }
            close(socket)  // the init waiting for GO reads EOF and exits
            var status: Int32 = 0
            waitpid(spawned, &status, 0)
            return (error, status)
        }
    }

    static func detail(_ message: xsb_msg) -> String {
        withUnsafeBytes(of: message.detail) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    @Test("the init accepts a valid description, and refuses broken ones naming what is wrong")
    func descriptionChecks() async throws {
        let valid = try Self.validDescription()
        let accepted = try await Self.runInit(description: Self.memfd(valid))
        #expect(accepted.error == nil, "a valid description was refused: \(accepted.error.map(Self.detail) ?? "")")
        #expect(accepted.status == 127 << 8, "it waited for GO and left on EOF: \(accepted.status)")

        func refusal(_ bytes: [UInt8], seal: Bool = true) async throws -> String {
            let fd = Self.memfd(bytes, seal: seal)
            defer { close(fd) }
            let run = try await Self.runInit(description: fd)
            #expect(run.status == 127 << 8, "it ended on its own, never on a signal: \(run.status)")
            guard let error = run.error else { return "(accepted)" }
            #expect(error.type == XSB_MSG_ERROR.rawValue && error.step == Int32(XSB_STEP_LAUNCH_DESCRIPTION.rawValue))
            return Self.detail(error)
        }
        func patched(_ offset: Int, _ value: UInt64) -> [UInt8] {
            var bytes = valid
            withUnsafeBytes(of: value.littleEndian) { for i in 0..<8 { bytes[offset + i] = $0[i] } }
            return bytes
        }
        #expect(try await refusal(valid, seal: false) == "launch description: not sealed")
        #expect(try await refusal(Array(valid.prefix(40))).contains("not a description"))
        #expect(try await refusal(patched(0, 0x1234_5678)).contains("bad magic"))
        #expect(try await refusal(valid + [0, 0, 0, 0, 0, 0, 0, 0]) == "launch description: size")
        // The header's spans (offset, length): path at 16, cwd at 32, hostname at 48, argv at 64.
        #expect(try await refusal(patched(16, UInt64(valid.count))) == "launch description: program path")
        #expect(try await refusal(patched(16, UInt64.max - 4)) == "launch description: program path")
        #expect(try await refusal(patched(24, 1)) == "launch description: program path")
        #expect(try await refusal(patched(32 + 8, UInt64.max)) == "launch description: working directory")
        #expect(try await refusal(patched(64 + 8, 17)) == "launch description: arguments")
        #expect(try await refusal(patched(64 + 8, 0)) == "launch description: no arguments (argv[0])")
    }

    /// The init walks targets from the new root and opens bind sources below /oldroot: ".." in
    /// either climbs out (a file op at "/../oldroot/…" is a file on the host's file system), and a
    /// device bind is read-write with device nodes usable. The supervisor never asks for them; an
    /// init that took them from a description would have done them.
    @Test("the init refuses '.' and '..' in mount paths and device binds it did not make itself")
    func descriptionMountPaths() async throws {
        let accepted = try await Self.runInit(description: Self.memfd(try Self.validDescription(extra: [
            RawMount(kind: XSB_MOUNT_BIND, source: "/usr/share", target: "/a/..b/c."),
        ])))
        #expect(accepted.error == nil, "names that only start or end with dots are fine: \(accepted.error.map(Self.detail) ?? "")")
        let cases: [(RawMount, String)] = [
            (RawMount(kind: XSB_MOUNT_FILE, source: "", target: "/../oldroot/tmp/x"), "a mount's target"),
            (RawMount(kind: XSB_MOUNT_TMPFS, source: "", target: "/a/../../oldroot/var"), "a mount's target"),
            (RawMount(kind: XSB_MOUNT_SYMLINK, source: "/x", target: "/./x"), "a mount's target"),
            (RawMount(kind: XSB_MOUNT_BIND, source: "/usr/..", target: "/x"), "a mount's source"),
            (RawMount(kind: XSB_MOUNT_BIND, source: "/../newroot", target: "/x"), "a mount's source"),
            (RawMount(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_DEVICE), source: "/dev/null", target: "/x"), "a mount's flags or mode"),
            (RawMount(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_ABSENT), source: "/usr", target: "/x"), "a mount's flags or mode"),
            // A detached source the header does not list, or on a mount that is not a bind.
            (RawMount(kind: XSB_MOUNT_BIND, flags: Int32(XSB_MOUNT_F_TREE), source: "/usr", target: "/x"), "a mount's detached source"),
            (RawMount(kind: XSB_MOUNT_TMPFS, flags: Int32(XSB_MOUNT_F_TREE), source: "", target: "/x"), "a mount's detached source"),
        ]
        for (mount, what) in cases {
            let fd = Self.memfd(try Self.validDescription(extra: [mount]))
            defer { close(fd) }
            let run = try await Self.runInit(description: fd)
            #expect(run.status == 127 << 8, "\(mount): \(run.status)")
            #expect(run.error.map(Self.detail) == "launch description: \(what)", "\(mount)")
        }
    }

    @Test("a description damaged anywhere is refused or harmless: the init never crashes on it")
    func damagedDescriptions() async throws {
        let valid = try Self.validDescription()
        var generator = SystemRandomNumberGenerator()
        for round in 0..<150 {
            var bytes = valid
            // Mostly the header and the arrays near it, sometimes anywhere.
            let span = round % 3 == 0 ? bytes.count : min(bytes.count, 512)
            for _ in 0..<(1 + round % 4) {
                let at = Int.random(in: 0..<span, using: &generator)
                bytes[at] = round % 2 == 0 ? UInt8.random(in: 0...255, using: &generator) : bytes[at] ^ 0x80
            }
            let fd = Self.memfd(bytes)
            let run = try await Self.runInit(description: fd)
            close(fd)
            #expect(run.status == 127 << 8, "round \(round): the init ended with status \(run.status)")
            if let error = run.error {
                #expect(error.step == Int32(XSB_STEP_LAUNCH_DESCRIPTION.rawValue), "round \(round): \(Self.detail(error))")
            }
        }
    }
}
