import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime
import Testing
import TestSupport

/// A running process is shared only with handles that would have launched exactly the same
/// sandbox: same identity, same executable file, same resolved policy. Reuse must never weaken
/// a sandbox.
@Suite("Process reuse never weakens a sandbox")
struct ProcessReuseTests {
    /// `socket()` is allowed under standard and a seccomp kill under hardened: asked from inside,
    /// each process shows the policy it really runs under.
    @Test("same identifier, stricter level: a separate process under the stricter policy")
    func stricterLevel() async throws {
        let name = "reuse-\(UUID().uuidString)"
        let recorder = Recorder()
        let standard = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(level: "standard", name: name)))
        defer { standard.invalidate() }
        let hardened = try await AppExtensionProcess(configuration: .init(
            identity: HostFixtures.identity(level: "hardened", name: name), onInterruption: recorder.onInterruption,
            onEvent: recorder.onEvent))
        defer { hardened.invalidate() }
        #expect(standard.sandbox.pid != hardened.sandbox.pid, "a hardened point must not get the standard process")
        #expect(!recorder.recordedEvents.contains(.reused))
        // A second standard handle does share the standard process.
        let again = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(level: "standard", name: name)))
        defer { again.invalidate() }
        #expect(again.sandbox.pid == standard.sandbox.pid)

        let standardConnection = try await standard.makeConnection()
        defer { standardConnection.invalidate() }
        #expect(HostFixtures.text(try await standardConnection.send(HostFixtures.message("socket"))) == "socket")
        let hardenedConnection = try await hardened.makeConnection()
        await #expect(throws: ExtensionError.self) { _ = try await hardenedConnection.send(HostFixtures.message("socket")) }
        #expect(await HostFixtures.eventually { recorder.recordedInterruptions == ["seccomp violation: socket"] },
                "\(recorder.recordedInterruptions)")
        // The standard process is untouched by the hardened one's end.
        #expect(HostFixtures.text(try await standardConnection.send(HostFixtures.message("still"))) == "still")
    }

    /// The host resolves a point's policy at every launch (through the process's policy store,
    /// which parses it again only when a file it was made of changed): an edit between two
    /// launches is what the second one runs under, and the first keeps its own.
    @Test("a policy file edited between two launches: the next handle runs under the edited policy")
    func editedPolicyTakesEffectAtTheNextLaunch() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-reuse-policy-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        chmod(directory, 0o755)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/edited.yaml"
        let standard = HostFixtures.policiesDirectory + "/standard.yaml"
        try Fixtures.writeFile(path, Array("version: 1\nextends: \(standard)\n".utf8), mode: 0o644)
        let name = "reuse-policy-\(UUID().uuidString)"
        let identity = {
            AppExtensionIdentity.developmentOnly(
                bundleIdentifier: name, executablePath: HostFixtures.productsDirectory + "/xsb-echo-extension",
                point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: path))
        }
        let recorder = Recorder()
        let before = try await AppExtensionProcess(configuration: .init(identity: identity()))
        defer { before.invalidate() }
        let unchanged = try await AppExtensionProcess(configuration: .init(identity: identity()))
        defer { unchanged.invalidate() }
        #expect(unchanged.sandbox.pid == before.sandbox.pid, "an unchanged policy shares the running process")

        // The edit makes it extend hardened, whose seccomp policy kills `socket()`.
        try Fixtures.writeFile(path, Array("version: 1\nextends: \(HostFixtures.policiesDirectory)/hardened.yaml\n".utf8), mode: 0o644)
        let after = try await AppExtensionProcess(configuration: .init(
            identity: identity(), onInterruption: recorder.onInterruption, onEvent: recorder.onEvent))
        defer { after.invalidate() }
        #expect(after.sandbox.pid != before.sandbox.pid, "the edited policy must get a process of its own")

        let beforeConnection = try await before.makeConnection()
        defer { beforeConnection.invalidate() }
        #expect(HostFixtures.text(try await beforeConnection.send(HostFixtures.message("socket"))) == "socket")
        let afterConnection = try await after.makeConnection()
        await #expect(throws: ExtensionError.self) { _ = try await afterConnection.send(HostFixtures.message("socket")) }
        #expect(await HostFixtures.eventually { recorder.recordedInterruptions == ["seccomp violation: socket"] },
                "\(recorder.recordedInterruptions)")
    }

    @Test("same identifier, another executable or the executable replaced on disk: a separate process")
    func otherExecutable() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-reuse-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        chmod(directory, 0o755)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let original = HostFixtures.productsDirectory + "/xsb-echo-extension"
        let copy = directory + "/echo"
        func install(at path: String) throws {
            let staging = path + ".new"
            try? FileManager.default.removeItem(atPath: staging)
            // O_CLOEXEC, and closed before anything runs it: a sandbox cloned by a concurrent test
            // must not inherit a writable fd of it (execve would fail with ETXTBSY).
            let bytes = try Data(contentsOf: URL(fileURLWithPath: original))
            let fd = open(staging, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o755)
            #expect(fd >= 0)
            _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
            chmod(staging, 0o755)
            #expect(rename(staging, path) == 0)
        }
        /// A concurrent test's clone may still hold the fd for a moment: ETXTBSY is retried.
        func launch(_ identity: AppExtensionIdentity) async throws -> AppExtensionProcess {
            for _ in 0..<20 {
                do { return try await AppExtensionProcess(configuration: .init(identity: identity)) } catch {
                    guard case .sandboxFailed(let failure) = error, failure.errorNumber == ETXTBSY || "\(failure)".contains("Text file busy") else { throw error }
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            return try await AppExtensionProcess(configuration: .init(identity: identity))
        }
        try install(at: copy)

        let name = "reuse-exe-\(UUID().uuidString)"
        let point = AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml")
        let fromBuild = try await AppExtensionProcess(configuration: .init(
            identity: AppExtensionIdentity.developmentOnly(bundleIdentifier: name, executablePath: original, point: point)))
        defer { fromBuild.invalidate() }
        let fromCopy = try await launch(AppExtensionIdentity.developmentOnly(bundleIdentifier: name, executablePath: copy, point: point))
        defer { fromCopy.invalidate() }
        #expect(fromBuild.sandbox.pid != fromCopy.sandbox.pid, "another executable path")

        // The same path, but a new file there: not the process running the old one.
        try install(at: copy)
        let replaced = try await launch(AppExtensionIdentity.developmentOnly(bundleIdentifier: name, executablePath: copy, point: point))
        defer { replaced.invalidate() }
        #expect(replaced.sandbox.pid != fromCopy.sandbox.pid, "the executable was replaced")
        // Unchanged since: shared.
        let same = try await launch(AppExtensionIdentity.developmentOnly(bundleIdentifier: name, executablePath: copy, point: point))
        defer { same.invalidate() }
        #expect(same.sandbox.pid == replaced.sandbox.pid)
        for process in [fromBuild, fromCopy, replaced] {
            let connection = try await process.makeConnection()
            #expect(HostFixtures.text(try await connection.send(HostFixtures.message("hi"))) == "hi")
            connection.invalidate()
        }
    }
}
