import Foundation
import Glibc
@testable import SandboxRuntime
import SandboxSystem
import TestSupport
import Synchronization
import Testing

/// The spawner thread clones every sandbox, and a clone copies the cloning thread's fd table:
/// the spawner keeps a table of its own, so that neither the copy nor the child's closing of
/// it grows with the fds the host holds (2–3 per running sandbox), and no host fd is ever in a
/// sandbox's clone.
@Suite("The spawner thread's fd table")
struct SpawnerTableTests {
    /// The fds in the table of the thread called `name` (its /proc/self/task entry).
    static func table(ofThreadNamed name: String) -> [Int32: String]? {
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
            guard comm.trimmingCharacters(in: .whitespacesAndNewlines) == name else { continue }
            let directory = "/proc/self/task/\(task)/fd"
            var table: [Int32: String] = [:]
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
                guard let fd = Int32(entry) else { continue }
                table[fd] = (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\(entry)")) ?? "?"
            }
            return table
        }
        return nil
    }

    /// Every thread but the spawner shares the host's table. A thread shares the table of the
    /// thread that creates it, so one created from the spawner thread (libdispatch starts a
    /// worker from the thread that enqueues work when none is idle, as when a launch resumed its
    /// caller there) would have the spawner's: its fds would not be the host's.
    @Test("after an idle spell and launches at once, every thread but the spawner has the host's fd table")
    func noOtherThreadSharesTheSpawnerTable() async throws {
        let marker = open("/dev/zero", O_RDONLY | O_CLOEXEC)
        try #require(marker >= 0)
        defer { close(marker) }
        let configuration = try Fixtures.probeConfiguration(["exit", "0"])
        for round in 0..<2 {
            // libdispatch ends a worker that has been idle for 5 s; the next work starts a new one.
            if round > 0 { try await Task.sleep(for: .seconds(6)) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        let sandbox = try await Supervisor.shared.launch(configuration)
                        _ = await sandbox.waitForExit()
                    }
                }
                try await group.waitForAll()
            }
        }
        // (Tests that make supervisors of their own leave a spawner thread each.)
        var spawners = 0
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            let comm = ((try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/task/\(task)/fd/\(marker)")
            if comm == "xsb-spawner" {
                spawners += 1
                // Its own table may hold another file at that number (its inbox, a launch's fds,
                // another test's supervisor's): only the host's file there is wrong.
                #expect(target != "/dev/zero", "spawner thread \(task) has the host's fd \(marker)")
            } else if let target {
                #expect(target == "/dev/zero", "thread \(task) (\(comm)): fd \(marker) is \(target)")
            } else if FileManager.default.fileExists(atPath: "/proc/self/task/\(task)") {
                Issue.record("thread \(task) (\(comm)) lacks the host's fd \(marker)")
            }
        }
        #expect(spawners >= 1)
    }

    @Test("a host holding 500 more fds: the spawner thread's table holds only its inbox and /dev/null, before and after launches")
    func spawnerTableHoldsNoHostFd() async throws {
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<500 {
            let fd = open("/dev/zero", O_RDONLY | O_CLOEXEC)
            try #require(fd >= 0)
            held.append(fd)
        }
        let configuration = try Fixtures.probeConfiguration(["exit", "0"])
        for _ in 0..<3 {
            let sandbox = try await Supervisor.shared.launch(configuration)
            #expect(await sandbox.waitForExit() == .exited(code: 0))
        }
        let table = try #require(Self.table(ofThreadNamed: "xsb-spawner"), "no thread called xsb-spawner")
        #expect(table.count == 4, "0–2 and the inbox, nothing of the host's: \(table.count) fds, \(table.sorted { $0.key < $1.key }.prefix(8))")
        for fd in Int32(0)...2 { #expect(table[fd] == "/dev/null", "fd \(fd): \(table[fd] ?? "closed")") }
        let others = table.filter { $0.key > 2 }.map(\.value)
        #expect(others.count == 1 && others.allSatisfy { $0.hasPrefix("socket:") }, "\(others)")
        // The host's own table is untouched: every fd it held is still its own.
        for fd in held { #expect(fcntl(fd, F_GETFD) >= 0) }
    }

    /// The signals blocked by each thread called `name` (`SigBlk` of its /proc/self/task entry).
    static func blockedSignals(ofThreadsNamed name: String) -> [UInt64] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).compactMap { task in
            let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
            guard comm.trimmingCharacters(in: .whitespacesAndNewlines) == name,
                  let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8),
                  let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }) else { return nil }
            return UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        }
    }

    /// A signal handler writes to fds by their numbers in the host's table (the CLI's wake-up
    /// pipes): run on the spawner thread, those numbers name the spawner's own files, its inbox
    /// among them. So the spawner blocks the asynchronous signals, whatever the mask of the
    /// thread that makes it (a one-shot command's main thread blocks none).
    @Test("the spawner thread blocks the asynchronous signals, even when made from a thread that blocks none")
    func spawnerNeverRunsSignalHandlers() throws {
        let made = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<SpawnerThread, SandboxError>?>(nil)
        try DetachedThread.start(name: "test-unblocked") {
            var none = sigset_t()
            sigemptyset(&none)
            pthread_sigmask(SIG_SETMASK, &none, nil)
            outcome.withLock { $0 = Result { () throws(SandboxError) in try SpawnerThread() } }
            made.signal()
        }
        made.wait()
        _ = try #require(outcome.withLock { $0 }).get()
        let masks = Self.blockedSignals(ofThreadsNamed: "xsb-spawner")
        let asynchronous = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGWINCH, SIGCONT, SIGALRM]
        #expect(!masks.isEmpty)
        for mask in masks {
            #expect(asynchronous.allSatisfy { mask & (1 << UInt64($0 - 1)) != 0 }, "SigBlk \(String(mask, radix: 16))")
        }
    }
}
