import Foundation
import Glibc
@testable import SandboxRuntime
import SandboxSystem
import Synchronization
import TestSupport
import Testing

/// The init passes its mount namespace with its EXIT report, so that its exit does not unmount
/// the sandbox's tree; the supervisor lets go of it once the end is reported.
@Suite("A sandbox's mount namespace at its end", .offThePool)
struct MountNamespaceReleaseTests {
    /// Whether this process holds an fd of the namespace `link` names ("mnt:[N]").
    static func heldHere(_ link: String) -> Bool {
        (SystemFiles.entries("/proc/self/fd") ?? []).contains { name in
            var buffer = [CChar](repeating: 0, count: 64)
            let count = readlink("/proc/self/fd/\(name)", &buffer, buffer.count - 1)
            return count > 0 && String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) == link
        }
    }

    /// What /proc/PID/ns/mnt names (read without opening it, which would hold it).
    static func mountNamespace(of pid: pid_t) -> String? {
        var buffer = [CChar](repeating: 0, count: 64)
        let count = readlink("/proc/\(pid)/ns/mnt", &buffer, buffer.count - 1)
        return count > 0 ? String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }

    @Test("held by the supervisor when the end is reported, and let go of afterwards (cold and warm launches)",
          arguments: [false, true])
    func heldUntilTheEndIsReported(warm: Bool) async throws {
        let supervisor = try Supervisor()
        defer { Task { await supervisor.drainPool() } }
        let configuration = try Fixtures.probeConfiguration(["sleep", "600"])
        if warm {
            try await supervisor.prepare(configuration, count: 1)
            #expect(supervisor.poolStatus.ready == 1)
        }
        let process = try await supervisor.launch(configuration)
        let namespace = try #require(Self.mountNamespace(of: process.pid))
        #expect(namespace != Self.mountNamespace(of: getpid()), "the sandbox has a mount namespace of its own")
        let heldAtEnd = Mutex<Bool?>(nil)
        process.whenEnded { _ in heldAtEnd.withLock { $0 = Self.heldHere(namespace) } }
        // The program ends (not the sandbox: a SIGKILL of the init sends no report): the init
        // reports its end with the namespace.
        try await process.signal(SIGTERM)
        #expect(await process.waitForExit() == .signaled(signal: SIGTERM))
        #expect(heldAtEnd.withLock { $0 } == true, "the init's exit was left to unmount the sandbox's tree")
        #expect(await Fixtures.eventually { !Self.heldHere(namespace) }, "the supervisor still holds \(namespace)")
    }

    @Test("beyond its capacity a release closes on the caller's thread: a burst of ends holds few fds")
    func boundedQueue() throws {
        let release = MountNamespaceRelease(capacity: 0)
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        let readEnd = try #require(FileDescriptor(adopting: ends[0]))
        let writeEnd = try #require(FileDescriptor(adopting: ends[1]))
        defer { readEnd.close() }
        release.release(writeEnd)
        // Closed already: the pipe's only writer is gone, so a read says end of file at once.
        var byte: UInt8 = 0
        #expect(read(readEnd.rawValue, &byte, 1) == 0)
        #expect(release.pending == 0)
    }
}
