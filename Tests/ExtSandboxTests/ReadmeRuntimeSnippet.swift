// README.md's runtime code, verbatim (ReadmeSnippetTests checks that it stays so): its imports
// here, its statements in a function (compiled, never run: the policy path is a placeholder).

import Foundation  // ProcessInfo, for the caller's environment
import SandboxPolicy
import SandboxRuntime

enum ReadmeRuntimeSnippet {
    static func run() async throws {
let policy = try PolicyLoader.load(file: "/path/to/Policies/standard.yaml")
let sandbox = try await Supervisor.shared.launch(SandboxConfiguration(
    executable: "/usr/bin/python3", arguments: ["python3", "-c", "print(1 + 1)"],
    environment: SandboxEnvironment.compose(policy: policy, caller: ProcessInfo.processInfo.environment),
    policy: policy))
print(await sandbox.waitForExit())   // exited, signaled, seccompViolation(syscall:), memoryLimitExceeded, …
    }
}
