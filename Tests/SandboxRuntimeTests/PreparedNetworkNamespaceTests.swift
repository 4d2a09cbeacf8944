import Glibc
@testable import SandboxRuntime
import SandboxSystem
import TestSupport
import Testing

/// Cold launches as root take a network namespace the supervisor made ahead
/// (``PreparedNetworkNamespaces``): each sandbox still has one of its own, never the host's nor
/// another sandbox's, its loopback up, and nothing in it can change that namespace.
@Suite("Prepared network namespaces", .offThePool)
struct PreparedNetworkNamespaceTests {
    /// The network namespace behind `link` ("net:[INODE]"): its inode.
    static func inode(_ link: String) -> UInt64? {
        guard link.hasPrefix("net:["), link.hasSuffix("]") else { return nil }
        return UInt64(link.dropFirst(5).dropLast())
    }

    /// The host's network namespace (this thread's).
    static func hostNamespace() throws -> UInt64 {
        try #require(inode(SystemFiles.linkTarget("/proc/thread-self/ns/net") ?? ""))
    }

    /// The inodes of the namespaces `supervisor` holds ready.
    static func ready(_ supervisor: Supervisor) -> Set<UInt64> {
        Set(supervisor.networkNamespaces.readyDescriptors.compactMap { fd in
            var info = stat()
            return fstat(fd, &info) == 0 ? UInt64(info.st_ino) : nil
        })
    }

    /// The network namespaces this process holds open, as fds.
    static func openNamespaces() -> Set<UInt64> {
        let entries = SystemFiles.entries("/proc/self/fd") ?? []
        return Set(entries.compactMap { SystemFiles.linkTarget("/proc/self/fd/\($0)").flatMap(inode) })
    }

    /// What the probe's `check` printed (its one line), run in a sandbox of `supervisor`'s.
    static func probe(_ supervisor: Supervisor, _ check: String) async throws -> String {
        let output = OutputPipe()
        let process = try await supervisor.launch(Fixtures.probeConfiguration([check], stdout: output.writeFD))
        output.closeWriteEnd()
        let termination = await process.waitForExit()
        let text = await output.waitFor("\n")
        #expect(termination == .exited(code: 0), "\(check): \(text)")
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The namespace the probe saw itself in.
    static func namespace(_ supervisor: Supervisor) async throws -> UInt64 {
        let line = try await probe(supervisor, "netns")
        return try #require(line.split(separator: " ").last.flatMap { inode(String($0)) }, "\(line)")
    }

    /// A sandbox of `supervisor`'s that stays (the probe sleeping) and its network namespace, seen
    /// from the host: namespaces are compared while both are alive (a number is reused once its
    /// namespace is gone).
    static func sleeping(_ supervisor: Supervisor) async throws -> (SandboxedProcess, UInt64) {
        let output = OutputPipe()
        let process = try await supervisor.launch(Fixtures.probeConfiguration(["sleep", "600"], stdout: output.writeFD))
        _ = await output.waitFor("sleeping")
        let namespace = try #require(inode(SystemFiles.linkTarget("/proc/\(process.pid)/ns/net") ?? ""))
        return (process, namespace)
    }

    /// A supervisor whose cold launches have made their namespaces ready.
    static func supervisorWithReadyNamespaces() async throws -> Supervisor {
        try #require(geteuid() == 0, "only root's supervisor prepares network namespaces")
        let supervisor = try Supervisor()
        _ = try await namespace(supervisor)  // the first cold launch asks for them
        let readyCount = Supervisor.preparedNetworkNamespaces
        try #require(await Fixtures.eventually { supervisor.networkNamespaces.readyCount == readyCount })
        return supervisor
    }

    @Test("a cold launch as root runs in a prepared namespace: its own, not the host's, not another sandbox's")
    func ownPreparedNamespace() async throws {
        let supervisor = try await Self.supervisorWithReadyNamespaces()
        let host = try Self.hostNamespace()
        let (other, othersNamespace) = try await Self.sleeping(supervisor)
        defer { other.kill() }
        #expect(othersNamespace != host)
        for _ in 0..<3 {
            _ = await Fixtures.eventually { supervisor.networkNamespaces.readyCount == Supervisor.preparedNetworkNamespaces }
            let prepared = Self.ready(supervisor)
            let inside = try await Self.namespace(supervisor)
            #expect(prepared.contains(inside), "the launch took one of the prepared namespaces \(prepared), not \(inside)")
            #expect(inside != host && inside != othersNamespace)
            #expect(!Self.ready(supervisor).contains(inside), "used once: no longer ready")
            #expect(!Self.openNamespaces().contains(inside), "the host keeps no fd of a namespace once handed over")
        }
    }

    @Test("in a prepared namespace loopback is up and carries TCP and UDP, and the sandbox cannot take it down")
    func loopbackUpAndOutOfReach() async throws {
        let supervisor = try await Self.supervisorWithReadyNamespaces()
        let net = try await Self.probe(supervisor, "net")
        #expect(net.hasPrefix("net: ok") && net.contains("interfaces=lo lo=UP"), "\(net)")
        _ = await Fixtures.eventually { supervisor.networkNamespaces.readyCount > 0 }
        let loopback = try await Self.probe(supervisor, "loopback")
        #expect(loopback.hasPrefix("loopback: ok"), "\(loopback)")
        _ = await Fixtures.eventually { supervisor.networkNamespaces.readyCount > 0 }
        let down = try await Self.probe(supervisor, "lo-down")
        #expect(down.hasPrefix("lo-down: blocked (EPERM)"), "\(down)")
    }

    @Test("a supervisor that prepares none launches in the clone's own namespace, loopback up, as before")
    func withoutPreparedNamespaces() async throws {
        let supervisor = try Supervisor(cgroups: CgroupSupport.detect(), networkNamespaces: PreparedNetworkNamespaces(mayPrepare: false))
        let host = try Self.hostNamespace()
        let (other, othersNamespace) = try await Self.sleeping(supervisor)
        defer { other.kill() }
        let inside = try await Self.namespace(supervisor)
        #expect(othersNamespace != host && inside != host && inside != othersNamespace)
        #expect(supervisor.networkNamespaces.readyCount == 0)
        let net = try await Self.probe(supervisor, "net")
        #expect(net.contains("interfaces=lo lo=UP"), "\(net)")
    }

    @Test("a namespace the spawner cannot use is left for the clone's own: never the host's, never a file that is none",
          arguments: ["/proc/thread-self/ns/net", "/dev/null"])
    func unusableNamespaceFallsBack(path: String) async throws {
        let supervisor = try Supervisor(cgroups: CgroupSupport.detect(), networkNamespaces: PreparedNetworkNamespaces(mayPrepare: false))
        let host = try Self.hostNamespace()
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0, "open \(path): errno \(errno)")
        supervisor.networkNamespaces.insertReady(fd)
        let inside = try await Self.namespace(supervisor)
        #expect(inside != host, "the sandbox ran in the host's network namespace")
        #expect(supervisor.networkNamespaces.readyCount == 0, "the launch took it")
        supervisor.networkNamespaces.insertReady(dup(fd))
        let net = try await Self.probe(supervisor, "net")
        #expect(net.hasPrefix("net: ok") && net.contains("interfaces=lo lo=UP"), "the init brought its own loopback up: \(net)")
    }

    @Test("nothing of the prepared namespaces outlives the supervisor")
    func closedWithTheSupervisor() async throws {
        var supervisor: Supervisor? = try await Self.supervisorWithReadyNamespaces()
        let prepared = Self.ready(supervisor!)
        #expect(prepared.count == Supervisor.preparedNetworkNamespaces)
        #expect(prepared.isSubset(of: Self.openNamespaces()))
        weak let ended = supervisor
        supervisor = nil
        #expect(ended == nil, "the supervisor is gone")
        #expect(Self.openNamespaces().isDisjoint(with: prepared), "its namespaces' fds are closed")
    }
}
