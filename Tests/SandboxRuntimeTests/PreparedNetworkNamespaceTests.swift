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
        var seen: Set<UInt64> = []
        for _ in 0..<3 {
            let prepared = Self.ready(supervisor)
            let inside = try await Self.namespace(supervisor)
            #expect(prepared.contains(inside), "the launch took one of the prepared namespaces \(prepared), not \(inside)")
            #expect(inside != host)
            #expect(seen.insert(inside).inserted, "namespace \(inside) served two sandboxes")
            #expect(!Self.openNamespaces().contains(inside), "the host keeps no fd of a namespace once handed over")
            _ = await Fixtures.eventually { supervisor.networkNamespaces.readyCount == Supervisor.preparedNetworkNamespaces }
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
        let first = try await Self.namespace(supervisor), second = try await Self.namespace(supervisor)
        #expect(first != host && second != host && first != second)
        #expect(supervisor.networkNamespaces.readyCount == 0)
        let net = try await Self.probe(supervisor, "net")
        #expect(net.contains("interfaces=lo lo=UP"), "\(net)")
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
