// README.md's host code, verbatim (ReadmeSnippetTests checks that it stays so, and runs it).
// This file imports only what the README's host imports: it is how a new host developer's file
// looks, so `Termination` and the rest must be visible from `import ExtSandbox` alone.

// The host: any program that depends on ExtSandbox and the contract
import ExtSandbox
import TextTransformContract

extension AppExtensionPoint {
    @Definition static var text: AppExtensionPoint {
        Name("com.example.text")
        Scope(restriction: .none)    // extensions installed anywhere, once the owner approves them
        SecurityLevel("hardened")    // the policy they run under: the host decides, never the extension
    }
}

/// `text`, transformed by the first extension the owner approved for `.text`; nil when there is none.
func transform(_ text: String) async throws -> String? {
    let monitor = try await AppExtensionPoint.Monitor(.text)   // live: monitor.updates follows changes
    guard let identity = monitor.identities.first else { return nil }   // `extsandbox list` says why
    let process = try await AppExtensionProcess(configuration: .init(
        identity: identity, onInterruption: { (reason: Termination) in print("interrupted: \(reason)") }))
    let connection = try await process.makeConnection()
    defer { connection.invalidate() }   // with no connection open the sandbox is suspended, later ended
    let proxy = try connection.remoteObject($TextTransform.self)
    return try await proxy.apply(text)   // "HELLO" for "hello"
}

/// The README's point declaration step (compiled, never run here: it writes into /usr/local).
func readmeWriteDeclaration() throws {
try AppExtensionHost.current.writeDeclaration(points: [.text], to: "/usr/local/lib/extsandbox/points/com.example.host.appext")
}
