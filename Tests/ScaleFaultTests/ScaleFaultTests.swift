import ExtSandbox
import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import Synchronization
import TestSupport
import Testing

/// Host-level faults (issue 14): a host SIGKILLed with extensions running, thousands of
/// launch/use/invalidate cycles, and bombs in one sandbox next to others, all through the public
/// host API with real sandboxes.
@Suite("Host-level faults", .serialized)
struct ScaleFaultTests {
    static var bench: String { TestPaths.product("xsb-bench") }
    static var echo: String { TestPaths.echoExtension }
    static var probe: String { TestPaths.probe }
    static let hardened = TestPaths.policiesDirectory + "/hardened.yaml"

    /// Cycles in the suite: about 30 ms each (two at a time) on a loaded 2-core machine, so about
    /// a minute and a half; `scripts/bench --faults` runs the full 10,000 (docs/performance.md).
    /// A launch costs more the more tasks the machine runs (up to 200 ms a cycle while another
    /// host held 3,000 sandboxes), so the run also stops after ``cycleSeconds``, and must have
    /// done at least ``minimumCycles`` by then.
    static let cycleCount = 3_000
    static let cycleSeconds = 150
    static let minimumCycles = 500

    // MARK: The host SIGKILLed

    @Test("the host SIGKILLed while 50 extensions run: every sandboxed process is gone within a second")
    func hostKilled() async throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: Self.bench)
        child.arguments = ["--child-host", "50", "--extension", Self.echo, "--scale-policy", Self.hardened]
        child.environment = TestPaths.environmentWithPolicies()
        let out = Pipe(), err = Pipe()
        child.standardOutput = out
        child.standardError = err
        child.standardInput = FileHandle.nullDevice
        try child.run()
        // Blocking reads on a thread of their own, not on the pool other tests' sandboxes use.
        let text = await offThePool { () -> String in
            var text = ""
            while !text.contains("READY\n") {
                let data = out.fileHandleForReading.availableData
                if data.isEmpty { break }
                text += String(decoding: data, as: UTF8.self)
            }
            return text
        }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("PIDS ") }) else {
            kill(child.processIdentifier, SIGKILL)
            await offThePool { child.waitUntilExit() }
            let stderr = await offThePool { String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
            Issue.record("the child host did not report its sandboxes: \(text)\nstderr: \(stderr)")
            return
        }
        let pids = line.dropFirst(5).split(separator: " ").compactMap { pid_t($0) }
        // An init and the extension's program per sandbox, each one a real, running process.
        #expect(pids.count >= 100, "pids: \(pids)")
        let starts = Dictionary(uniqueKeysWithValues: pids.map { ($0, Self.processState($0)?.startTime) })
        #expect(starts.values.allSatisfy { $0 != nil }, "a reported process was not running before the kill")
        // Alive: the same process (not a reused pid) and not yet a zombie.
        func alive(_ pid: pid_t) -> Bool {
            guard let state = Self.processState(pid), state.startTime == starts[pid] ?? nil else { return false }
            return state.state != "Z"
        }

        let killed = Date()
        kill(child.processIdentifier, SIGKILL)
        while Date().timeIntervalSince(killed) < 1 && pids.contains(where: alive) {
            try await Task.sleep(for: .milliseconds(5))
        }
        let elapsed = Date().timeIntervalSince(killed)
        let survivors = pids.filter(alive)
        await offThePool { child.waitUntilExit() }
        #expect(survivors.isEmpty, "alive 1 s after the host's SIGKILL: \(survivors.map { "\($0) \(Self.processState($0)?.state ?? "?")" })")
        print(String(format: "host SIGKILLed: %d sandboxed processes of 50 extensions gone after %.0f ms", pids.count, elapsed * 1000))
        // Whatever survived must not outlive the test.
        for pid in survivors { kill(pid, SIGKILL) }
    }

    // MARK: Cycles

    @Test("3,000 launch/use/invalidate cycles (or 150 s of them): no growth in fds, threads, children, zombies, cgroups, mounts; bounded memory")
    func cycles() async throws {
        // In a process of its own (xsb-bench), where nothing else opens descriptors or threads.
        // Niced: its minute or two of launches on every core would otherwise starve the timing
        // tests that run meanwhile (a CLI's 1 s wall-clock limit took 13 s to end its run); when
        // nothing else runs it has the machine to itself (3,000 cycles take about 70 s).
        let result = try await Fixtures.run(["/usr/bin/nice", "-n", "10", Self.bench, "--cycles-only", "\(Self.cycleCount)",
                                             "--cycle-time-limit", "\(Self.cycleSeconds)", "--extension", Self.echo,
                                             "--scale-policy", Self.hardened],
                                            environment: TestPaths.environmentWithPolicies())
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        guard let object, let growth = object["growth"] as? [String: Int] else {
            Issue.record("xsb-bench --cycles-only: status \(result.status)\nstdout: \(result.stdout)\nstderr: \(result.stderr)")
            return
        }
        let context = Comment(rawValue: result.stdout)
        let done = object["cycles"] as? Int ?? 0
        #expect(done == Self.cycleCount || (object["time_limited"] as? Bool == true && done >= Self.minimumCycles), context)
        #expect(object["failed"] as? Int == 0, context)
        for key in ["fds", "threads_not_dispatch_workers", "children", "zombies", "cgroups", "mounts"] {
            #expect(growth[key] == 0, "\(key) grew by \(growth[key] ?? -1): \(result.stdout)")
        }
        // The pool that closes what extensions sent keeps at most its maximum of threads.
        #expect((growth["descriptor_closers_beyond_maximum"] ?? .max) <= 0, "\(result.stdout)")
        // libdispatch's pool may keep a worker or two more after a busy run; a leak is far more.
        let slack = object["dispatch_worker_slack"] as? Int ?? 0
        #expect((growth["threads"] ?? .max) <= slack, "threads grew by \(growth["threads"] ?? -1): \(result.stdout)")
        let bound = object["memory_growth_bound_kib"] as? Int ?? 0
        #expect((growth["anonymous_kib"] ?? .max) <= bound, "anonymous memory grew by \(growth["anonymous_kib"] ?? -1) KiB: \(result.stdout)")
        #expect(result.status == 0, context)
        print("cycles: \(done) of \(Self.cycleCount) in \(object["seconds"] ?? "?") s, growth \(growth)")
    }

    // MARK: Bombs

    /// Something hostile inside one sandbox, at its peak for a while.
    enum Bomb: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case fork = "fork-bomb", memory = "memory-bomb", tmp = "tmp-fill", fds = "fd-exhaust"
        var testDescription: String { rawValue }

        /// The probe's arguments: hold the peak 3 s (the memory bomb has no peak to hold: its
        /// sandbox's memory limit ends it).
        var arguments: [String] {
            switch self {
            case .fork: ["fork-bomb", "0", "3"]
            case .memory: ["memory-bomb"]
            case .tmp, .fds: [rawValue, "3"]
            }
        }
    }

    @Test("a bomb inside one sandbox stays inside it: the host and other extensions keep answering", arguments: Bomb.allCases)
    func bomb(_ bomb: Bomb) async throws {
        // Two bystanders, each at a hardened point with a connection open.
        var bystanders: [(process: AppExtensionProcess, connection: ExtensionConnection)] = []
        for index in 0..<2 {
            let identity = AppExtensionIdentity.developmentOnly(
                bundleIdentifier: "bystander-\(bomb.rawValue)-\(index)-\(UUID().uuidString)", executablePath: Self.echo,
                point: AppExtensionPoint(name: "org.extsandbox.test.faults", securityLevel: Self.hardened))
            let process = try await AppExtensionProcess(configuration: .init(
                identity: identity, suspendAfter: .seconds(600), terminateAfter: .seconds(1200)))
            bystanders.append((process, try await process.makeConnection()))
        }
        defer { for bystander in bystanders { bystander.connection.invalidate(); bystander.process.invalidate() } }
        try await Self.checkHost(bystanders.map(\.connection), while: "before the \(bomb.rawValue)")

        // The bomb, under `standard` (it may fork, write /tmp, open files), its output in a pipe.
        let (policy, note) = try Self.bombPolicy()
        if let note { print(note) }
        var pipeFDs: [Int32] = [-1, -1]
        #expect(pipe(&pipeFDs) == 0)
        for fd in pipeFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let output = OutputCollector(fd: pipeFDs[0])
        let sandbox: SandboxedProcess
        do {
            sandbox = try await Supervisor.shared.launch(SandboxConfiguration(
                executable: Self.probe, arguments: ["xsb-probe"] + bomb.arguments,
                environment: SandboxEnvironment.compose(policy: policy, caller: ProcessInfo.processInfo.environment),
                policy: policy, standardInput: .null, standardOutput: .fileDescriptor(borrowed(pipeFDs[1])), standardError: .null))
        } catch {
            close(pipeFDs[1])
            throw error
        }
        close(pipeFDs[1])
        defer { sandbox.kill() }

        // While it grows and while it holds its peak: the host and the bystanders keep answering.
        let peak = "\(bomb.rawValue): ok"
        let deadline = Date().addingTimeInterval(120)
        var rounds = 0
        while !output.text.contains(peak) && sandbox.isRunning && Date() < deadline {
            try await Self.checkHost(bystanders.map(\.connection), while: "the \(bomb.rawValue) grows (round \(rounds))")
            rounds += 1
        }
        if output.text.contains(peak) {
            for round in 0..<3 {
                try await Self.checkHost(bystanders.map(\.connection), while: "the \(bomb.rawValue) holds its peak (round \(round))")
            }
        }
        let termination = await sandbox.waitForExit()
        let text = await output.wait()
        let context = Comment(rawValue: "\(bomb.rawValue): \(termination); output: \(text)")

        // It was stopped by its own sandbox's limit, not by the machine's.
        switch bomb {
        case .fork:
            let count = Self.number(after: "fork failed (EAGAIN) after ", in: text)
            #expect(count != nil && count! < 256, context)  // standard: processes 256
        case .memory:
            let killed = termination == .memoryLimitExceeded || termination == .signaled(signal: SIGKILL)
            #expect(killed || text.contains("memory-bomb: ok malloc failed"), context)
            if let mib = Self.number(after: "after ", in: text) { #expect(mib <= 1024, context) }  // standard: memory 1G
        case .tmp:
            let mib = Self.number(after: "/tmp full (ENOSPC) after ", in: text)
            #expect(mib != nil && mib! <= 256, context)  // standard: /tmp 256M
        case .fds:
            let count = Self.number(after: "open failed (EMFILE) after ", in: text)
            #expect(count != nil && count! < 1024, context)  // standard: open-files 1024
        }
        #expect(rounds > 0 || text.contains(peak), "the host was never checked while the bomb ran: \(context)")
        try await Self.checkHost(bystanders.map(\.connection), while: "after the \(bomb.rawValue)")
    }

    /// The host can still start a program, open descriptors and write its /tmp, and every
    /// bystander answers within 10 s.
    static func checkHost(_ connections: [ExtensionConnection], while what: String) async throws {
        for (index, connection) in connections.enumerated() {
            let payload = Array("ping \(index)".utf8)
            let reply = try await withTimeout(seconds: 10, "bystander \(index) while \(what)") {
                try await connection.send(ExtensionMessage(payload))
            }
            #expect(reply.payload == payload, "bystander \(index) while \(what)")
        }
        #expect(spawnTrue() == 0, "the host could not start /bin/true while \(what)")
        let fds = (0..<64).map { _ in open("/dev/null", O_RDONLY | O_CLOEXEC) }
        #expect(fds.allSatisfy { $0 >= 0 }, "the host could not open 64 descriptors while \(what)")
        for fd in fds where fd >= 0 { close(fd) }
        let path = "/tmp/xsb-scale-fault-\(getpid())-\(UUID().uuidString)"
        let block = [UInt8](repeating: 7, count: 1 << 20)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        #expect(fd >= 0, "the host could not create a file in its /tmp while \(what)")
        if fd >= 0 {
            #expect(block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == block.count,
                    "the host could not write 1 MiB to its /tmp while \(what)")
            close(fd)
            unlink(path)
        }
    }

    /// `standard`; for a caller with no memory cgroup to write (not root on cgroup v1, no
    /// delegation on v2), the same with per-process memory limits, and a note saying so.
    static func bombPolicy() throws -> (Policy, String?) {
        if Supervisor.shared.hasCgroupLimits { return (try PolicyLoader.load(file: TestPaths.policiesDirectory + "/standard.yaml"), nil) }
        let directory = try TestPaths.makePolicyDirectory("faults")
        let path = directory.appendingPathComponent("standard.yaml").path
        try "version: 1\nextends: \(TestPaths.policiesDirectory)/standard.yaml\nlimits:\n  memory-scope: per-process\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        return (try PolicyLoader.load(file: path),
                "bombs: no writable memory cgroup for this user, so the bomb's memory limit is per process (memory-scope: per-process)")
    }

    // MARK: Helpers

    static func number(after marker: String, in text: String) -> Int? {
        guard let range = text.range(of: marker) else { return nil }
        return Int(text[range.upperBound...].prefix { $0.isNumber })
    }

    struct TimedOut: Error, CustomStringConvertible {
        var description: String
    }

    static func withTimeout<T: Sendable>(seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask { try await Task.sleep(for: .seconds(seconds)); return nil }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw TimedOut(description: "\(what): no answer within \(seconds) s")
            }
            return value
        }
    }

    static func spawnTrue() -> Int32 {
        var pid: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { free(argv[0]) }
        guard posix_spawn(&pid, "/bin/true", nil, nil, &argv, environ) == 0 else { return -1 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status
    }

    static func processState(_ pid: pid_t) -> (state: String, startTime: UInt64)? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
        guard fields.count > 19, let start = UInt64(fields[19]) else { return nil }
        return (String(fields[0]), start)
    }
}

/// Everything a sandbox writes to a pipe, read on a thread of its own.
final class OutputCollector: Sendable {
    private let collected = Mutex((text: "", done: false))

    init(fd: Int32) {
        Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                let chunk = String(decoding: buffer[..<count], as: UTF8.self)
                self.collected.withLock { $0.text += chunk }
            }
            close(fd)
            self.collected.withLock { $0.done = true }
        }.start()
    }

    var text: String { collected.withLock { $0.text } }

    /// The whole output, once the writer's end is closed (at most 10 s, polled without holding
    /// a pool thread).
    func wait() async -> String {
        _ = await Fixtures.eventually(within: 10) { collected.withLock { $0.done } }
        return text
    }
}
