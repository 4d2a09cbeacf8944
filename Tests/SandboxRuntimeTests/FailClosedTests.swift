import CSandboxShim
import Foundation
import Glibc
import SandboxPolicy
@testable import SandboxRuntime
import SandboxSystem
import Testing
import TestSupport

/// When an isolation step cannot be set up, the launch fails naming the step, and nothing runs.
@Suite("Fail closed")
struct FailClosedTests {
    @Test("a missing bind source fails the launch")
    func missingBindSource() async throws {
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        config.extraMounts = [.bind(source: "/nonexistent/xsb", destination: "/data", writable: false, optional: false)]
        let error = await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        #expect(error?.step == .bindMount)
        #expect(error?.errorNumber == ENOENT)
        #expect(error?.description.contains("/nonexistent/xsb") == true)
    }

    @Test("an optional bind source that is missing is skipped")
    func optionalBindSource() async throws {
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        config.extraMounts = [.bind(source: "/nonexistent/xsb", destination: "/data", writable: false, optional: true)]
        let process = try await Supervisor.shared.launch(config)
        #expect(await process.waitForExit() == .exited(code: 0))
    }

    @Test("reserved or relative destinations are refused", arguments: ["/", "/proc", "/dev/sda", "relative", "/a/../etc"])
    func badDestination(destination: String) async throws {
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        config.extraMounts = [.bind(source: "/usr", destination: destination, writable: false, optional: false)]
        await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
    }

    @Test("device nodes cannot be bound")
    func deviceBind() async throws {
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        config.extraMounts = [.bind(source: "/dev/null", destination: "/null", writable: false, optional: false)]
        await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
    }

    // Off the pool: compiling this filter twice takes seconds of CPU (half a minute in a debug
    // build on a loaded machine), which on a pool thread would hold up other tests' launches.
    @Test("a seccomp filter that will not load fails the launch at the seccomp step", .offThePool)
    func seccompWillNotLoad() async throws {
        // More than BPF_MAXINSNS (4096) instructions: the kernel refuses the program.
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        // Few rules with many 64-bit conditions each: large BPF, quick for libseccomp to build.
        let rules = (0..<400).map { i in
            SyscallRule(syscall: "syslog", action: .errno(EPERM), conditions: (0..<5).map { arg in
                ArgumentCondition(index: arg, op: .equal, value: UInt64(0x1_0000_0000) * UInt64(i + 1) + UInt64(arg))
            })
        }
        config.policy.seccomp.rules += rules
        try #require(try config.policy.compileSeccompFilter().instructionCount > 4096)
        let error = await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        #expect(error?.step == .seccomp, "\(String(describing: error))")
    }

    @Test("no user namespaces: the launch fails at clone, it never runs unconfined")
    func noUserNamespaces() async throws {
        // max_user_namespaces is per user namespace: setting it to 0 inside a throwaway one
        // affects only this test's supervisor.
        let script = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\""
        let result = try await Fixtures.run(["/usr/bin/unshare", "--user", "--map-root-user", "/bin/sh", "-c", script, "sh",
                                       Fixtures.cli, "exec", "--policy", Fixtures.standardPolicyPath, "--", Fixtures.probe, "exit", "0"])
        #expect(result.status == 125, "\(result.stderr)")
        #expect(result.stderr.contains("clone3"), "\(result.stderr)")
    }

    @Test("a cgroup limit that cannot be set fails the launch")
    func cgroupLimitFails() async throws {
        // A parent directory that is not a cgroup: creating the child works, setting the
        // limit does not, and the launch must stop there.
        let fake = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-fake-cgroup-\(getpid())").path
        try FileManager.default.createDirectory(atPath: fake, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: fake) }
        let supervisor = try Supervisor(cgroups: CgroupSupport(layout: .v1(memoryParent: fake, pidsParent: nil)))
        let error = await #expect(throws: SandboxError.self) {
            _ = try await supervisor.launch(Fixtures.probeConfiguration(["exit", "0"]))
        }
        #expect(error?.step == .cgroup)
        #expect(error?.description.contains("memory.limit_in_bytes") == true)
        #expect((try? FileManager.default.contentsOfDirectory(atPath: fake))?.isEmpty == true, "nothing left in the fake cgroup")
    }

    @Test("a program that does not exist fails the launch")
    func missingProgram() async throws {
        var config = try Fixtures.probeConfiguration([])
        config.executable = "/nonexistent/program"
        await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        let result = try await Fixtures.run([Fixtures.cli, "exec", "--", "no-such-program-xsb"])
        #expect(result.status == 127)
    }
}

/// Findings of the security review, kept as regression tests.
@Suite("Hardening regressions")
struct HardeningTests {
    /// A writable bind lets a sandbox plant a symlink; a later launch must never follow it
    /// out of the sandbox's root (onto the host through the staging /oldroot).
    @Test("mount targets never follow a symlink planted in a writable bind")
    func plantedSymlink() async throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-symlink-\(getpid())").path
        let writable = base + "/w", outside = base + "/outside"
        try FileManager.default.createDirectory(atPath: writable, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        // What a sandbox could have left behind in its writable directory.
        try FileManager.default.createSymbolicLink(atPath: writable + "/a", withDestinationPath: "/oldroot" + outside)
        try FileManager.default.createSymbolicLink(atPath: writable + "/b", withDestinationPath: "../outside")

        for nested: MountEntry in [
            .tmpfs(destination: "/w/a/sub", sizeBytes: 1 << 20),
            .bind(source: "/usr/share", destination: "/w/a/share", writable: false, optional: false),
            .bind(source: "/usr/share", destination: "/w/b/share", writable: false, optional: false),
        ] {
            var config = try Fixtures.probeConfiguration(["exit", "0"])
            config.extraMounts = [.bind(source: writable, destination: "/w", writable: true, optional: false), nested]
            await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        }
        #expect((try FileManager.default.contentsOfDirectory(atPath: outside)).isEmpty, "nothing may appear outside")
    }

    @Test("a closed standard fd of the supervisor never reaches the sandbox")
    func closedStdin() async throws {
        // The CLI started with stdin closed: the sandbox must get /dev/null there, not
        // whatever the runtime opened into slot 0.
        let result = try await Fixtures.run(["/bin/sh", "-c", "exec \"$@\" <&-", "sh", Fixtures.cli, "exec", "--policy",
                                       Fixtures.standardPolicyPath, "--", "/bin/sh", "-c", "readlink /proc/self/fd/0"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "/dev/null\n", "\(result.stdout)")
    }

    @Test("a file descriptor that is not open is refused")
    func unopenedFD() async throws {
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        // Above the fd limit: no other test running beside this one can have it open.
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &limit)
        config.extraFileDescriptors = [borrowed(Int32(min(limit.rlim_cur, 1 << 30)) + 1)]
        let error = await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        #expect(error?.errorNumber == EBADF)
    }

    /// A descriptor its owner has closed: its number may be open again by now, for something
    /// else, which the sandbox must not get.
    @Test("a file descriptor closed by its owner is refused, though its number is open again")
    func closedFD() async throws {
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        let closed = try #require(FileDescriptor(adopting: open("/dev/null", O_RDONLY | O_CLOEXEC)))
        closed.close()
        let reused = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(reused) }
        config.standardInput = .fileDescriptor(closed)
        let error = await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        #expect(error?.errorNumber == EBADF)
    }

    /// Audit mode reported every call of a number outside the syscall table, each time: a
    /// program calling syscall(n) for ever new n grew the supervisor's set of audited names
    /// (and the CLI's report) without bound.
    @Test("audit mode reports a bounded number of unknown syscall numbers, however many are made")
    func auditReportIsBounded() async throws {
        var config = try Fixtures.probeConfiguration(["unknown-syscalls", "3000"])
        config.auditSeccomp = true
        let process = try await Supervisor.shared.launch(config)
        let termination = await process.waitForExit()
        #expect(termination == .exited(code: 0), "\(termination)")
        let unknown = process.auditedSyscalls.filter { $0.hasPrefix("syscall ") }
        #expect(!unknown.isEmpty && unknown.count <= 64, "\(unknown.count) unknown numbers reported")
    }

    /// Limits the policy does not name are the supervisor's, inherited; an RLIMIT_RTPRIO above 0
    /// (audio groups often get 95) lets SCHED_FIFO run without privilege, and a busy loop at
    /// real-time priority starves the host's CPUs (the probe's `rt-priority` check shows it on a
    /// host that has one; this machine's hard limit is 0 and cannot be raised here).
    @Test("no sandbox inherits the supervisor's real-time priority or nice limits")
    func schedulingLimitsPinned() throws {
        let plan = ResourceLimitPlan(try Fixtures.standardPolicy().limits)
        for resource in [XSB_RLIMIT_RTPRIO, XSB_RLIMIT_NICE] {
            let limit = plan.rlimits.first { $0.resource == Int32(resource) }
            #expect(limit?.soft == 0 && limit?.hard == 0, "resource \(resource): \(String(describing: limit))")
        }
    }

    /// The seccomp listener is one more fd of the payload, under its open-files limit. A limit
    /// that left no number for it failed the launch at "seccomp filter: listener slot" with the
    /// advice for a host out of fds; it is the policy's limit, and the error says what works.
    @Test("an open-files limit too low for the program's fds fails at the limit, naming the least that works")
    func openFilesTooLow() async throws {
        // stdin and stdout /dev/null, stderr passed: fds 0-2, the listener 3.
        var config = try Fixtures.probeConfiguration(["exit", "0"])
        config.policy.limits.openFiles = 3
        let error = await #expect(throws: SandboxError.self) { _ = try await Supervisor.shared.launch(config) }
        #expect(error?.step == .resourceLimit, "\(String(describing: error))")
        #expect(error?.errorNumber == EMFILE)
        #expect(error?.detail.hasSuffix("need a limit of at least 4") == true, "\(String(describing: error))")
        #expect(error?.advice == nil, "the host's fds are not the cause: \(String(describing: error))")

        config.policy.limits.openFiles = 4
        let process = try await Supervisor.shared.launch(config)
        #expect(await process.waitForExit() == .exited(code: 0))
    }

    @Test("the sandbox init is not dumpable once running")
    func initNotDumpable() async throws {
        // From inside, the init (PID 1) must not expose the supervisor's memory image.
        let script = """
            for f in /proc/1/environ /proc/1/mem /proc/1/fd/64; do cat $f >/dev/null 2>&1 && echo "$f readable"; done
            ls /proc/1/root >/dev/null 2>&1 && echo "root readable"; echo done
            """
        let result = try await Fixtures.exec(["/bin/sh", "-c", script])
        #expect(result.stdout == "done\n", "\(result.stdout)")
    }
}
