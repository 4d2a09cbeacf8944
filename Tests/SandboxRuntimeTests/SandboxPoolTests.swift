import CSandboxShim
import Foundation
import Glibc
import SandboxPolicy
@testable import SandboxRuntime
import SandboxSystem
import TestSupport
import Testing

/// Warm launches: pre-built, single-use sandboxes of one shape, handed what is per launch.
@Suite("Pre-built sandboxes", .offThePool)
struct SandboxPoolTests {
    /// A supervisor of the test's own: its pool is no other test's.
    static func supervisor() throws -> Supervisor { try Supervisor() }

    static func shell(_ script: String, stdout: Int32? = nil, arguments: [String] = []) throws -> SandboxConfiguration {
        let policy = try Fixtures.standardPolicy()
        return SandboxConfiguration(
            executable: "/bin/sh", arguments: ["sh", "-c", script, "sh"] + arguments,
            environment: SandboxEnvironment.compose(policy: policy, caller: ProcessInfo.processInfo.environment),
            policy: policy, standardOutput: stdout.map { .fileDescriptor(borrowed($0)) } ?? .null)
    }

    /// A fresh directory with an empty `data` in it (the caller removes `directory`).
    static func dataDirectory(_ name: String) throws -> (directory: String, source: String) {
        let directory = try TestPaths.makePolicyDirectory(name).path
        let source = directory + "/data"
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        return (directory, source)
    }

    /// Prints /data/secret (if it shows) and "end", under a policy that binds `source` at /data
    /// and masks /data/secret.
    static func maskedSecret(_ source: String, stdout: Int32) throws -> SandboxConfiguration {
        var configuration = try shell("cat /data/secret 2>/dev/null; echo end", stdout: stdout)
        configuration.policy.filesystem.mounts.append(.bind(source: source, destination: "/data", writable: false, optional: false))
        configuration.policy.filesystem.masked.append("/data/secret")
        return configuration
    }

    static func readyPIDs(_ supervisor: Supervisor) -> Set<pid_t> { Set(supervisor.pool.all.ready.map(\.started.pid)) }

    @Test("a warm launch runs the program with the arguments, environment, working directory and stdio it was given")
    func runsAsGiven() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        try await supervisor.prepare(try Self.shell(""), count: 2)
        #expect(supervisor.poolStatus.ready == 2)

        // Another program the policy's binds show: the same shape.
        var shape = try Self.shell("")
        shape.executable = "/bin/true"
        shape.arguments = ["true"]
        var pids = Self.readyPIDs(supervisor)
        let trueProcess = try await supervisor.launch(shape)
        #expect(pids.contains(trueProcess.pid), "the launch took a pre-built sandbox")
        #expect(await trueProcess.waitForExit() == .exited(code: 0))

        let input = OutputPipe(), output = OutputPipe()
        _ = write(input.writeFD, "from stdin\n", 11)
        input.closeWriteEnd()
        var configuration = try Self.shell(#"echo "$1|$FOO|$(pwd)"; cat; echo err >&2"#, stdout: output.writeFD, arguments: ["first arg"])
        configuration.environment["FOO"] = "bar"
        configuration.workingDirectory = "/tmp"
        configuration.standardInput = .fileDescriptor(borrowed(input.readFD))
        configuration.standardError = .fileDescriptor(borrowed(output.writeFD))
        pids = Self.readyPIDs(supervisor)
        let process = try await supervisor.launch(configuration)
        output.closeWriteEnd()
        #expect(pids.contains(process.pid), "the launch took a pre-built sandbox")
        let text = await output.waitFor("err")
        #expect(text == "first arg|bar|/tmp\nfrom stdin\nerr\n")
        #expect(await process.waitForExit() == .exited(code: 0))
        // Its replacement is built in the background.
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 2 })
    }

    @Test("a warm launch whose launch part is too large for the LAUNCH message gets it as a memfd, whole", arguments: [1 << 10, 48 << 10])
    func largeLaunchParts(argumentBytes: Int) async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        try await supervisor.prepare(try Self.shell(""), count: 1)
        let output = OutputPipe()
        let argument = String(repeating: "x", count: argumentBytes - 1) + "y"
        let pids = Self.readyPIDs(supervisor)
        let process = try await supervisor.launch(try Self.shell(#"printf '%s\n' "${#1}${1#${1%?}}""#, stdout: output.writeFD, arguments: [argument]))
        output.closeWriteEnd()
        #expect(pids.contains(process.pid), "the launch took a pre-built sandbox")
        #expect(await output.waitFor("\n") == "\(argumentBytes)y\n")
        #expect(await process.waitForExit() == .exited(code: 0))
    }

    /// The largest part that goes inside the message fills the init's buffer exactly; the next
    /// size up (parts grow by 8 bytes) is a memfd. A buffer one byte short would truncate the
    /// first, and the launch would go cold.
    @Test("launch parts at the inline limit and just past it both arrive whole", arguments: [0, 8])
    func launchPartsAtTheInlineLimit(past: Int) async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        try await supervisor.prepare(try Self.shell(""), count: 1)
        let output = OutputPipe()
        let script = #"printf '%s\n' "${#1}""#
        func partSize(_ argument: String) throws -> Int {
            let configuration = try Self.shell(script, stdout: output.writeFD, arguments: [argument])
            let part = LaunchPlan.launchPart(configuration, executable: try supervisor.shape(of: configuration).executable, stdio: (-1, output.writeFD, -1))
            var passed = xsb_passed_fds()
            var blob: UnsafeMutablePointer<CChar>?
            var size: UInt64 = 0
            try #require(part.withConfiguration { xsb_launch_part_write(&$0, &passed, &blob, &size) } == 0)
            free(blob)
            return Int(size)
        }
        let target = Int(XSB_LAUNCH_PART_INLINE_MAX) + past
        var argument = String(repeating: "x", count: 16)
        argument += String(repeating: "x", count: target - (try partSize(argument)))
        while try partSize(argument) > target { argument.removeLast() }
        try #require(try partSize(argument) == target, "a part of \(target) bytes")
        let pids = Self.readyPIDs(supervisor)
        let process = try await supervisor.launch(try Self.shell(script, stdout: output.writeFD, arguments: [argument]))
        output.closeWriteEnd()
        #expect(pids.contains(process.pid), "the launch took the pre-built sandbox")
        #expect(await output.waitFor("\n") == "\(argument.utf8.count)\n")
        #expect(await process.waitForExit() == .exited(code: 0))
    }

    @Test("a launch part the socket's buffer cannot hold in one message goes as a memfd instead")
    func launchPartPastTheSocketBuffer() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        try await supervisor.prepare(try Self.shell(""), count: 1)
        let output = OutputPipe()
        let argument = String(repeating: "x", count: 12_000)
        let configuration = try Self.shell(#"printf '%s\n' "${#1}""#, stdout: output.writeFD, arguments: [argument])
        let shape = try supervisor.shape(of: configuration)
        let ready = try #require(supervisor.pool.take(shape.key))
        // The smallest send buffer the kernel allows: a datagram of 12 KB does not fit.
        var small: Int32 = 1
        #expect(setsockopt(ready.started.control_fd, SOL_SOCKET, SO_SNDBUF, &small, socklen_t(MemoryLayout<Int32>.size)) == 0)
        let process = try #require(try await supervisor.launch(
            configuration, stdio: Supervisor.checkedStandardStreams(configuration), executable: shape.executable, in: ready))
        output.closeWriteEnd()
        #expect(process.pid == ready.started.pid, "the pre-built sandbox ran it")
        #expect(await output.waitFor("\n") == "12000\n")
        #expect(await process.waitForExit() == .exited(code: 0))
    }

    @Test("two consecutive warm launches of one shape share no state")
    func nothingShared() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let shape = try Self.shell("")
        try await supervisor.prepare(shape, count: 2)
        let pids = Self.readyPIDs(supervisor)

        // The first leaves what it can behind, and stays while the second looks.
        let first = OutputPipe()
        let leaving = try Self.shell("""
            echo a > /tmp/mark; echo b > /dev/shm/mark; ipcmk -M 4096 >/dev/null
            echo "first sees $(ls /tmp /dev/shm | grep -c mark) marks, $(ipcs -m | grep -c '^0x') segments"
            exec python3 -c 'import socket,time; s=socket.socket(socket.AF_UNIX); s.bind("\\0xsb-pool-test"); s.listen(); print("listening", flush=True); time.sleep(60)'
            """, stdout: first.writeFD)
        let firstProcess = try await supervisor.launch(leaving)
        defer { firstProcess.kill() }
        let seenFirst = await first.waitFor("listening")
        #expect(seenFirst.contains("first sees 2 marks, 1 segments"), "\(seenFirst)")

        let second = OutputPipe()
        let looking = try Self.shell("""
            echo "marks: $(ls /tmp /dev/shm | grep -c mark)"
            echo "segments: $(ipcs -m | grep -c '^0x')"
            echo "hostname: $(hostname)"
            python3 -c 'import socket
            s=socket.socket(socket.AF_UNIX)
            try:
                s.connect("\\0xsb-pool-test"); print("abstract: connected")
            except OSError:
                print("abstract: refused")'
            echo done
            """, stdout: second.writeFD)
        let secondProcess = try await supervisor.launch(looking)
        second.closeWriteEnd()
        let seen = await second.waitFor("done")
        #expect(pids.contains(firstProcess.pid) && pids.contains(secondProcess.pid), "both were pre-built")
        #expect(seen == "marks: 0\nsegments: 0\nhostname: extsandbox\nabstract: refused\ndone\n", "\(seen)")
        #expect(await secondProcess.waitForExit() == .exited(code: 0))
    }

    @Test("a bind source replaced since the sandbox was built makes the launch cold")
    func staleBindSource() async throws {
        let directory = try TestPaths.makePolicyDirectory("pool-stale").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let source = directory + "/data"
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        try "old\n".write(toFile: source + "/file", atomically: false, encoding: .utf8)
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let output = OutputPipe()
        var configuration = try Self.shell("cat /data/file", stdout: output.writeFD)
        configuration.extraMounts = [.bind(source: source, destination: "/data", writable: false, optional: false)]
        try await supervisor.prepare(configuration, count: 1)
        let pids = Self.readyPIDs(supervisor)

        // Another directory at the same path: the pre-built sandbox shows the old one.
        try FileManager.default.moveItem(atPath: source, toPath: directory + "/old")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        try "new\n".write(toFile: source + "/file", atomically: false, encoding: .utf8)
        let process = try await supervisor.launch(configuration)
        output.closeWriteEnd()
        #expect(!pids.contains(process.pid), "the stale sandbox was not used")
        #expect(await output.waitFor("\n") == "new\n")
        #expect(await process.waitForExit() == .exited(code: 0))
        #expect(await Fixtures.eventually { pids.allSatisfy { Fixtures.processState($0) == nil } }, "the stale one is gone")
    }

    @Test("a sandbox pre-built before the shape changed (a masked path appeared) is never handed to the new shape")
    func builtBeforeTheShapeChanged() async throws {
        let (directory, source) = try Self.dataDirectory("pool-rekey")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let output = OutputPipe()
        let configuration = try Self.maskedSecret(source, stdout: output.writeFD)
        // Built while the masked file does not exist: the mask leaves it out of these (absent).
        try await supervisor.prepare(configuration, count: 2)
        let before = Self.readyPIDs(supervisor)
        try "SECRET\n".write(toFile: source + "/secret", atomically: false, encoding: .utf8)
        // One dies idle: its replacement is built as the new shape (with the mask), and the shelf follows it.
        let victim = try #require(before.first)
        kill(victim, SIGKILL)
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 2 && !Self.readyPIDs(supervisor).contains(victim) })
        let process = try await supervisor.launch(configuration)
        output.closeWriteEnd()
        #expect(await output.waitFor("end\n") == "end\n", "the masked file is hidden")
        #expect(await process.waitForExit() == .exited(code: 0))
        #expect(!before.contains(process.pid), "no sandbox built as the old shape ran the launch")
    }

    @Test("releasing a reservation ends its sandboxes even when their shape changed since (a masked path appeared)")
    func releaseAfterTheShapeChanged() async throws {
        let (directory, source) = try Self.dataDirectory("pool-release")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let configuration = try Self.maskedSecret(source, stdout: 1)
        let reservation = try await supervisor.prepare(configuration, count: 2)
        let before = Self.readyPIDs(supervisor)
        #expect(before.count == 2)
        // The shape as computed now differs from the one the sandboxes were kept under.
        try "SECRET\n".write(toFile: source + "/secret", atomically: false, encoding: .utf8)
        await supervisor.release(reservation)
        #expect(supervisor.poolStatus == SandboxPoolStatus(ready: 0, building: 0, idleMemoryBytes: 0), "\(supervisor.poolStatus)")
        for pid in before { #expect(Fixtures.processState(pid) == nil, "pid \(pid) is gone") }
        await supervisor.release(reservation)  // a second release does nothing
        #expect(supervisor.poolStatus.ready == 0)
    }

    @Test("two callers preparing one shape keep the sum of their counts, and one's release leaves the other's")
    func reservationsAddUp() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let first = try await supervisor.prepare(try Self.shell(""), count: 1)
        let second = try await supervisor.prepare(try Self.shell(""), count: 2)
        #expect(supervisor.poolStatus.ready == 3)
        await supervisor.release(first)
        #expect(supervisor.poolStatus.ready == 2, "the second caller's are kept")
        // A launch takes one; its replacement is built for the second caller.
        let process = try await supervisor.launch(try Self.shell("exit 5"))
        #expect(await process.waitForExit() == .exited(code: 5))
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 2 })
        await supervisor.release(second)
        #expect(supervisor.poolStatus == SandboxPoolStatus(ready: 0, building: 0, idleMemoryBytes: 0), "\(supervisor.poolStatus)")
    }

    @Test("a reservation of fewer than one, or of more than the supervisor keeps, is refused")
    func reservationBounds() async throws {
        let supervisor = try Self.supervisor()
        let shape = try Self.shell("")
        let key = try supervisor.shape(of: shape).key
        let pool = SandboxPool(capacity: 3)
        for count in [0, -1] {
            #expect(throws: SandboxError.self) { try pool.reserve(key, shape, count: count) }
            do { _ = try pool.reserve(key, shape, count: count) } catch { #expect(error.errorNumber == EINVAL) }
        }
        let kept = try pool.reserve(key, shape, count: 2)
        do {
            _ = try pool.reserve(key, shape, count: 2)
            Issue.record("a fourth sandbox was reserved in a pool of three")
        } catch {
            #expect(error.errorNumber == E2BIG)
            #expect(error.detail.contains("with 2 kept already"), "\(error.detail)")
        }
        #expect(pool.release(kept).isEmpty, "nothing was built")
        _ = try pool.reserve(key, shape, count: 3)
    }

    @Test("shapes whose paths or hostname differ only in how a character is spelled are two shapes")
    func shapesSpelledOtherwise() throws {
        let supervisor = try Self.supervisor()
        let (directory, _) = try Self.dataDirectory("pool-spelling")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for name in ["caf\u{e9}", "cafe\u{301}"] { mkdir(directory + "/" + name, 0o755) }
        func shape(_ name: String, hostname: String = "extsandbox") throws -> SandboxPool.Key {
            var configuration = try Self.shell("")
            configuration.hostname = hostname
            configuration.extraMounts = [.bind(source: directory + "/" + name, destination: "/data", writable: false, optional: false)]
            return try supervisor.shape(of: configuration).key
        }
        #expect(try shape("caf\u{e9}") == shape("caf\u{e9}"))
        // Equal as Swift strings, two directories to the kernel.
        #expect(try shape("caf\u{e9}") != shape("cafe\u{301}"))
        #expect(try shape("caf\u{e9}", hostname: "h\u{e9}") != shape("caf\u{e9}", hostname: "he\u{301}"))
    }

    @Test("a masked file renamed over on the host stays masked in a pre-built sandbox, which is still used")
    func maskedFileRenamedOver() async throws {
        let (directory, source) = try Self.dataDirectory("pool-mask")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "OLD\n".write(toFile: source + "/secret", atomically: false, encoding: .utf8)
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let output = OutputPipe()
        let configuration = try Self.maskedSecret(source, stdout: output.writeFD)
        try await supervisor.prepare(configuration, count: 1)
        let before = Self.readyPIDs(supervisor)
        // What a configuration writer does: a new file renamed over the old one.
        try "NEW\n".write(toFile: source + "/secret.tmp", atomically: false, encoding: .utf8)
        #expect(rename(source + "/secret.tmp", source + "/secret") == 0)
        let process = try await supervisor.launch(configuration)
        output.closeWriteEnd()
        #expect(await output.waitFor("end\n") == "end\n", "the masked file is hidden")
        #expect(await process.waitForExit() == .exited(code: 0))
        #expect(before.contains(process.pid), "no mount on the way to the mask sits on a host file: nothing went stale")
    }

    @Test("a pre-built sandbox stopped from outside while idle fails only itself: the launch is built cold")
    func stoppedWhileIdle() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let shape = try Self.shell("exit 3")
        try await supervisor.prepare(shape, count: 1)
        let victim = try #require(Self.readyPIDs(supervisor).first)
        #expect(kill(victim, SIGSTOP) == 0)
        let process = try await supervisor.launch(shape)
        #expect(process.pid != victim)
        #expect(await process.waitForExit() == .exited(code: 3))
        #expect(await Fixtures.eventually { Fixtures.processState(victim) == nil }, "the stopped one is gone")
    }

    @Test("a pre-built sandbox killed while idle is dropped and replaced")
    func killedWhileIdle() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let shape = try Self.shell("exit 3")
        try await supervisor.prepare(shape, count: 1)
        let pids = Self.readyPIDs(supervisor)
        let victim = try #require(pids.first)
        kill(victim, SIGKILL)
        #expect(await Fixtures.eventually { Fixtures.processState(victim) == nil }, "reaped")
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 1 && !Self.readyPIDs(supervisor).contains(victim) })
        let process = try await supervisor.launch(shape)
        #expect(await process.waitForExit() == .exited(code: 3))
    }

    @Test("a refill builds nothing while a warm launch waits for its answer, and goes on after it")
    func refillWaitsForWarmLaunch() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        let shape = try Self.shell("")
        try await supervisor.prepare(shape, count: 2)
        let key = try supervisor.shape(of: shape).key
        let taken = try #require(supervisor.pool.take(key))
        // As a launch's take does: the pool is short of one, and a refill is asked for.
        supervisor.refill()
        try await Task.sleep(for: .milliseconds(300))
        // (The one it waits to build counts as being built already.)
        #expect(supervisor.poolStatus.ready == 1, "nothing is built beside the launch: \(supervisor.poolStatus)")
        supervisor.pool.launchEnded()
        taken.discard()
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 2 }, "the refill goes on once the launch has its answer")
    }

    /// A supervisor of its own, keeping `prepared` sandboxes of a shell's shape and holding its
    /// refill for `holdMilliseconds` while a warm launch's program starts, and a warm launch of
    /// `script` in it (the caller drains the pool).
    static func warmLaunch(_ script: String, prepared: Int, holdMilliseconds: Int) async throws -> (Supervisor, SandboxedProcess) {
        let supervisor = try Self.supervisor()
        supervisor.pool.startingMilliseconds.store(holdMilliseconds, ordering: .relaxed)
        var shape = try Self.shell("")
        try await supervisor.prepare(shape, count: prepared)
        shape.arguments = ["sh", "-c", script, "sh"]
        return (supervisor, try await supervisor.launch(shape))
    }

    @Test("a refill builds nothing while a warm launch's program starts, and goes on once it has settled")
    func refillWaitsForStartingProgram() async throws {
        // First moments long enough to look at.
        let (supervisor, running) = try await Self.warmLaunch("sleep 600", prepared: 2, holdMilliseconds: 2_000)
        defer { running.kill(); Task { await supervisor.drainPool() } }
        #expect(supervisor.pool.programsStarting == 1, "the warm launch's program counts as starting")
        try await Task.sleep(for: .milliseconds(300))
        #expect(supervisor.poolStatus.ready == 1 && supervisor.poolStatus.building == 0,
                "nothing is built beside the starting program: \(supervisor.poolStatus)")
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 2 }, "refilled once its first moments are over")
        #expect(supervisor.pool.programsStarting == 0)
    }

    @Test("a shape with none ready waits for a starting program only so long: a steady stream of launches never keeps it empty")
    func emptyShelfWaitsOnlySoLong() async throws {
        let supervisor = try Self.supervisor()
        defer { Task { await supervisor.drainPool() } }
        // The shelf waits at most 2 s; the program counts as starting for 4 s: the refill has
        // the difference to build in, on a machine busy with other tests.
        supervisor.pool.startingMilliseconds.store(2_000, ordering: .relaxed)
        let shape = try Self.shell("")
        try await supervisor.prepare(shape, count: 1)
        let taken = try #require(supervisor.pool.take(try supervisor.shape(of: shape).key))
        supervisor.pool.launchEnded()
        taken.discard()
        // A program starting that nobody reports settled.
        supervisor.pool.programStarted(ObjectIdentifier(taken))
        supervisor.refill()
        try await Task.sleep(for: .milliseconds(300))
        #expect(supervisor.poolStatus.ready == 0 && supervisor.poolStatus.building == 0, "held at first: \(supervisor.poolStatus)")
        // Past the shelf's longest wait by 1 s, and 1 s short of the program's end of counting.
        try await Task.sleep(for: .milliseconds(2_700))
        // The next refill asked for (another program's settling, say) builds for the empty shelf.
        supervisor.refill()
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 1 }, "the empty shelf is built for after its longest wait")
        #expect(supervisor.pool.programsStarting == 1, "while the program still counts as starting")
    }

    @Test("a warm launch's replacement is built after its program ends")
    func refillAfterTheProgramEnds() async throws {
        let (supervisor, ending) = try await Self.warmLaunch("exit 3", prepared: 2, holdMilliseconds: 60_000)
        defer { Task { await supervisor.drainPool() } }
        #expect(await ending.waitForExit() == .exited(code: 3))
        #expect(await Fixtures.eventually { supervisor.poolStatus.ready == 2 }, "refilled after the program ended: \(supervisor.poolStatus)")
        #expect(supervisor.pool.programsStarting == 0)
    }

    @Test("draining the pool leaves no process, fd or cgroup behind")
    func drainLeavesNothing() async throws {
        let supervisor = try Self.supervisor()
        try await supervisor.prepare(try Self.shell(""), count: 3)
        let ready = supervisor.pool.all.ready
        #expect(ready.count == 3)
        #expect(supervisor.poolStatus.idleMemoryBytes > 0)
        func target(_ fd: Int32) -> String? { SystemFiles.linkTarget("/proc/self/fd/\(fd)") }
        let sockets = ready.map { ($0.started.control_fd, target($0.started.control_fd)) }
        let directories = ready.flatMap { $0.cgroup?.directories ?? [] }
        await supervisor.drainPool()
        #expect(supervisor.poolStatus == SandboxPoolStatus(ready: 0, building: 0, idleMemoryBytes: 0))
        for sandbox in ready { #expect(Fixtures.processState(sandbox.started.pid) == nil, "pid \(sandbox.started.pid) is gone") }
        for (fd, was) in sockets { #expect(target(fd) != was, "fd \(fd) (\(was ?? "")) is closed") }
        for directory in directories { #expect(!FileManager.default.fileExists(atPath: directory), "\(directory) is removed") }
        // A launch of the drained shape is cold, and still works.
        let process = try await supervisor.launch(try Self.shell("exit 4"))
        #expect(await process.waitForExit() == .exited(code: 4))
    }

    /// Value 0: the part should be the first fd (none came); 1: it should follow the message
    /// (nothing did); 2: no such way, with an fd or without (with one, only the value is wrong).
    @Test("a LAUNCH without its launch part fails at the step 'launch description', and the init ends",
          arguments: [(Int32(0), false), (1, false), (2, false), (2, true)])
    func launchWithoutPart(value: Int32, withDescriptor: Bool) async throws {
        let supervisor = try Self.supervisor()
        try await supervisor.prepare(try Self.shell(""), count: 1)
        let ready = try #require(supervisor.pool.take(supervisor.shape(of: try Self.shell("")).key))
        // The launch owns the control socket from here (the wait's failure closes it).
        let control = ready.handOver()
        if withDescriptor {
            let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
            defer { close(null) }
            #expect(Self.sendLaunch(control, value: value, descriptor: null) == MemoryLayout<xsb_msg>.size)
        } else {
            #expect(xsb_send_msg(control, UInt32(XSB_MSG_LAUNCH.rawValue), value) == 0)
        }
        let result = await LaunchSetupWait.wait(for: ready.started, on: supervisor.monitor, timeoutMilliseconds: 5000)
        #expect(result.failed_step == Int32(XSB_STEP_LAUNCH_DESCRIPTION.rawValue))
        let detail = withUnsafeBytes(of: result.detail) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        #expect(detail == "launch description: the launch message")
        #expect(Fixtures.processState(ready.started.pid) == nil, "the init is gone (abandoned: killed and reaped)")
        ready.cgroup?.remove()
        await supervisor.drainPool()
    }

    /// A `LAUNCH` with `value` and `descriptor` attached (SCM_RIGHTS), as no supervisor sends it.
    static func sendLaunch(_ control: Int32, value: Int32, descriptor: Int32) -> Int {
        var message = xsb_msg()
        message.type = UInt32(XSB_MSG_LAUNCH.rawValue)
        message.value = value
        let space = MemoryLayout<cmsghdr>.size + MemoryLayout<Int32>.size + 8
        var controlBytes = [UInt8](repeating: 0, count: space)
        return withUnsafeMutableBytes(of: &message) { body in
            controlBytes.withUnsafeMutableBytes { ancillary in
                var vector = iovec(iov_base: body.baseAddress, iov_len: body.count)
                return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                    var header = msghdr()
                    header.msg_iov = vectorPointer
                    header.msg_iovlen = 1
                    header.msg_control = ancillary.baseAddress
                    header.msg_controllen = MemoryLayout<cmsghdr>.size + MemoryLayout<Int32>.size
                    let cmsg = ancillary.baseAddress!.assumingMemoryBound(to: cmsghdr.self)
                    cmsg.pointee.cmsg_len = MemoryLayout<cmsghdr>.size + MemoryLayout<Int32>.size
                    cmsg.pointee.cmsg_level = SOL_SOCKET
                    cmsg.pointee.cmsg_type = Int32(SCM_RIGHTS)
                    (ancillary.baseAddress! + MemoryLayout<cmsghdr>.size).storeBytes(of: descriptor, as: Int32.self)
                    return sendmsg(control, &header, 0)
                }
            }
        }
    }

    @Test("a launch part damaged anywhere is refused, naming what is wrong, and never crashes its reader")
    func damagedLaunchParts() throws {
        let arena = CArena()
        var config = xsb_spawn_config()
        config.path = UnsafePointer(arena.string("/bin/true"))
        config.argv = UnsafePointer(arena.stringArray(["true", "x"]))
        config.envp = UnsafePointer(arena.stringArray(["A=b"]))
        config.cwd = UnsafePointer(arena.string("/"))
        config.stdio = (-1, 1, 2)
        config.exec_fd = -1
        var passed = xsb_passed_fds()
        var fd: Int32 = -1
        try #require(xsb_launch_part_create(&config, &passed, &fd) == 0)
        var info = stat()
        fstat(fd, &info)
        var valid = [UInt8](repeating: 0, count: Int(info.st_size))
        #expect(pread(fd, &valid, valid.count, 0) == valid.count)
        close(fd)
        #expect(passed.count == 2)

        // As a memfd (a large part), and as the bytes of the LAUNCH message (a small one): both
        // must refuse alike.
        func check(_ bytes: [UInt8], passed: Int32 = 2, seal: Bool = true) -> String? {
            var inside: UnsafePointer<CChar>?
            let insideRefusal = xsb_launch_part_check_bytes(bytes, UInt64(bytes.count), passed, &inside) == 0 ? nil : String(cString: inside!)
            let fd = SandboxInitTests.memfd(bytes, seal: seal)
            defer { close(fd) }
            var what: UnsafePointer<CChar>?
            let refusal = xsb_launch_part_check(fd, passed, &what) == 0 ? nil : String(cString: what!)
            if seal { #expect(insideRefusal == refusal, "inside the message: \(insideRefusal ?? "accepted"), as a memfd: \(refusal ?? "accepted")") }
            return refusal
        }
        var empty: UnsafePointer<CChar>?
        #expect(xsb_launch_part_check_bytes(nil, 0, 0, &empty) != 0 && String(cString: empty!).contains("not a description"))
        #expect(check(valid) == nil)
        #expect(check(valid, seal: false) == "launch description: not sealed")
        #expect(check(valid, passed: 3) == "launch description: the launch part's file descriptors")
        #expect(check(valid, passed: 1) == "launch description: the launch part's file descriptors")
        #expect(check(Array(valid.prefix(16)))?.contains("not a description") == true)
        #expect(check(valid + [0, 0, 0, 0, 0, 0, 0, 0]) == "launch description: the launch part's size")
        var generator = SystemRandomNumberGenerator()
        for round in 0..<2000 {
            var bytes = valid
            for _ in 0..<(1 + round % 4) {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                bytes[at] = round % 2 == 0 ? UInt8.random(in: 0...255, using: &generator) : bytes[at] ^ 0x80
            }
            if let refused = check(bytes) { #expect(refused.hasPrefix("launch description"), "round \(round): \(refused)") }
        }
    }
}

/// The hostile probe's every check through a warm launch, against the same check launched cold:
/// a pre-built sandbox confines exactly as a cold one does.
@Suite("Escape attempts in pre-built sandboxes", .offThePool)
struct PooledIsolationTests {
    /// kill, sigsys, blocked or ok (`xsb-probe list`), per check.
    static func checks() async -> [String] {
        guard let output = try? await Fixtures.run([Fixtures.probe, "list"]) else { return [] }
        return output.stdout.split(separator: "\n").map { String($0) }
    }

    static let warm: Supervisor = { try! Supervisor() }()
    static let cold: Supervisor = { try! Supervisor() }()

    static func run(_ supervisor: Supervisor, _ arguments: [String]) async throws -> (Termination, String, pid_t) {
        let output = OutputPipe()
        let process = try await supervisor.launch(try Fixtures.probeConfiguration(arguments, stdout: output.writeFD))
        output.closeWriteEnd()
        let termination = await process.waitForExit()
        return (termination, await output.waitFor("\u{4}", seconds: 2), process.pid)
    }

    @Test("a forbidden operation is blocked in a pre-built sandbox as in a cold one", .serialized, arguments: await checks())
    func blocked(line: String) async throws {
        let words = line.split(separator: " ").map(String.init)
        let (name, expectation) = (words[0], words.count > 1 ? words[1] : "?")
        var arguments = [name]
        if name == "hostname" { arguments.append("extsandbox") }
        if name == "mounts" { arguments += ["/root", "/home", "/var", "/work/main/Sources", "/etc/shadow"] }
        let reservation = try await Self.warm.prepare(try Fixtures.probeConfiguration([]), count: 2)
        let pids = SandboxPoolTests.readyPIDs(Self.warm)
        let warmRun: (Termination, String, pid_t)
        do {
            warmRun = try await Self.run(Self.warm, arguments)
        } catch {
            await Self.warm.release(reservation)
            throw error
        }
        await Self.warm.release(reservation)
        let (warmEnd, warmOutput, pid) = warmRun
        let (coldEnd, coldOutput, _) = try await Self.run(Self.cold, arguments)
        #expect(pids.contains(pid), "\(name) ran in a pre-built sandbox")
        #expect(warmEnd == coldEnd, "\(name): warm \(warmEnd), cold \(coldEnd)")
        #expect(warmOutput == coldOutput, "\(name): warm \(warmOutput), cold \(coldOutput)")
        switch expectation {
        case "kill": #expect(warmEnd == .seccompViolation(syscall: words.count > 2 ? words[2] : nil), "\(name): \(warmEnd)")
        case "blocked": #expect(warmEnd == .exited(code: 0) && warmOutput.contains("\(name): blocked"), "\(name): \(warmEnd) \(warmOutput)")
        default: break
        }
    }
}

extension PooledIsolationTests {
    /// The same, from a host of its own (`xsb-bench --pooled-probe`) as root and as nobody: an
    /// unprivileged caller's pre-built sandboxes are its own ids' and confine as its cold ones.
    @Test("every probe check gives the same outcome warm and cold, as root and as nobody", arguments: Fixtures.Caller.allCases)
    func warmAndColdAlike(caller: Fixtures.Caller) async throws {
        var checks: [String] = []
        for line in await Self.checks() {
            let words = line.split(separator: " ").map(String.init)
            guard words.count > 1, ["kill", "sigsys", "blocked", "ok"].contains(words[1]) else { continue }
            if words[0] == "hostname" { checks.append("hostname extsandbox") }
            else if words[0] == "mounts" { checks.append("mounts /root /home /var /work/main/Sources /etc/shadow") }
            else { checks.append(words[0]) }
        }
        let result = try await Fixtures.run(
            [TestPaths.product("xsb-bench"), "--pooled-probe", Fixtures.probe, "--policy", Fixtures.policyPath(for: caller), "--"] + checks,
            as: caller)
        #expect(result.status == 0, "as \(caller):\n\(result.stdout)\n\(result.stderr)")
    }
}
