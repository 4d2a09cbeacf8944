import ExtSandbox
import Foundation
import Glibc
import SandboxRuntime
import Testing

/// Issue 12's typed errors: a launch that fails in the sandbox keeps the runtime's cause
/// (``SandboxError``, its step and `errno`) through ``ExtensionError``, not a string.
@Suite("Typed errors through the host API")
struct TypedErrorTests {
    @Test("a launch the sandbox refuses (an executable that cannot be executed) throws the runtime's SandboxError")
    func sandboxErrorKept() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-typed-\(UUID().uuidString)").path
        #expect(mkdir(directory, 0o755) == 0)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Not executable by anyone: execve fails with EACCES inside the sandbox.
        let executable = directory + "/not-executable"
        #expect(FileManager.default.createFile(atPath: executable, contents: Data("#!/bin/sh\n".utf8), attributes: [.posixPermissions: 0o644]))
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "typed-\(UUID().uuidString)", executablePath: executable,
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"))
        do {
            let process = try await AppExtensionProcess(configuration: .init(identity: identity))
            process.invalidate()
            Issue.record("a non-executable file was launched")
        } catch ExtensionError.sandboxFailed(let error) {
            #expect(error.errorNumber == EACCES, "\(error)")
        } catch let error as ExtensionError {
            Issue.record("not the typed sandbox error: \(error)")
        }
    }
}
