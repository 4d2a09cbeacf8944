@testable import ExtSandbox
import ExtSandboxWire
import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import Testing
import TestSupport

/// Issue 12's typed errors: a launch that fails in the sandbox keeps the runtime's cause
/// (``SandboxError``, its step and `errno`) through ``ExtensionError``, not a string. The host
/// API declares it (`throws(ExtensionError)`): the `catch` clauses below that name only a case
/// compile because the thrown type is known, not recovered with a cast.
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
        } catch .sandboxFailed(let error) {
            #expect(error.step == .exec, "\(error)")
            #expect(error.errorNumber == EACCES, "\(error)")
        } catch {
            Issue.record("not the typed sandbox error: \(error)")
        }
    }

    @Test("a launch whose policy file is broken throws the PolicyError, naming the file and line")
    func policyErrorKept() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-typed-\(UUID().uuidString)").path
        #expect(mkdir(directory, 0o755) == 0)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let policyFile = directory + "/broken.yaml"
        // The seccomp section has no `default:` (line 3 is its first entry).
        #expect(FileManager.default.createFile(atPath: policyFile, contents: Data("version: 1\nseccomp:\n  allow: [\"@default\"]\n".utf8)))
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "typed-\(UUID().uuidString)", executablePath: HostFixtures.productsDirectory + "/xsb-echo-extension",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: policyFile))
        do {
            let process = try await AppExtensionProcess(configuration: .init(identity: identity))
            process.invalidate()
            Issue.record("an extension was launched under a broken policy")
        } catch let failure {
            guard case .policyFailed(let level, let error) = failure else {
                Issue.record("not the typed policy error: \(failure)")
                return
            }
            #expect(level == policyFile)
            #expect(error.file == policyFile, "\(error)")
            #expect(error.line == 3, "\(error)")
            #expect(failure.underlying as? PolicyError == error)
            #expect("\(failure)".hasPrefix("the extension could not be launched: policy \(policyFile):3:"), "\(failure)")
        }
    }

    /// The extension's first frame on its control socket must be READY (docs/wire-protocol.md
    /// §7); anything else is a protocol error, reported as the typed WireError (§9).
    @Test("a protocol error before READY throws the typed WireError", arguments: [
        ("a request", #"os.write(3, struct.pack(">IBBHIQ", 16, 2, 0, 0, 0, 1))"#),
        ("an oversized frame", #"os.write(3, struct.pack(">I", 0xFFFFFFF0) + bytes(16))"#),
    ])
    func protocolErrorBeforeReady(label: String, send: String) async throws {
        let script = "import os, struct, time\n\(send)\ntime.sleep(30)\n"
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "typed-\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", script])
        do {
            let process = try await AppExtensionProcess(configuration: .init(identity: identity))
            process.invalidate()
            Issue.record("\(label) was taken for READY")
        } catch let failure {
            switch failure {
            case .protocolError(.unexpectedFrame(kind: .request, _)) where label == "a request": break
            case .protocolError(.frameTooLarge) where label == "an oversized frame": break
            default: Issue.record("\(label): not the typed WireError expected: \(failure)")
            }
            #expect(failure.underlying is WireError)
        }
    }

    /// An extension's own words (an error's or a rejection's message) reach hosts' logs and
    /// terminals: their control characters are shown escaped, the value itself kept.
    @Test("an extension's error message is described with its control characters escaped")
    func remoteMessagesAreEscaped() {
        let forged = "bad\u{1B}[2K\r\u{202E}ok"
        for error in [ExtensionError.remote(code: 7, message: forged), .rejected(forged)] {
            let text = error.description
            #expect(!text.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\r" || $0 == "\u{202E}" }, "\(text)")
            #expect(text.hasSuffix("bad\\e[2K\\r\\u{202e}ok"), "\(text)")
        }
        guard case .remote(_, let message) = ExtensionError.remote(code: 7, message: forged) else { return }
        #expect(message == forged)
    }

    @Test("a launch discovery refuses is an ExtensionError: .discovery, with its DiscoveryError")
    func discoveryRefusalIsAnExtensionError() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      securityLevel: HostFixtures.policiesDirectory + "/standard.yaml")
        let monitor = try await AppExtensionPoint.Monitor(
            points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations))
        defer { monitor.cancel() }
        let issued = try #require(monitor.identities.first)
        // Another version than the one issued: not an identity discovery produced.
        let forged = AppExtensionIdentity(
            bundleIdentifier: issued.bundleIdentifier, displayName: issued.displayName, version: "9.9", point: issued.point,
            hostIdentifier: issued.hostIdentifier, executablePath: issued.executablePath, arguments: issued.arguments,
            origin: issued.origin)
        do {
            let process = try await AppExtensionProcess(configuration: .init(identity: forged))
            process.invalidate()
            Issue.record("a forged identity was launched")
        } catch .discovery(.notDiscovered(let identifier)) {
            #expect(identifier == issued.bundleIdentifier)
        } catch {
            Issue.record("not the discovery refusal: \(error)")
        }
        // One catch sees it with its cause and its words.
        let refusal = ExtensionError.discovery(.notDiscovered(identifier: issued.bundleIdentifier))
        #expect(refusal.underlying is DiscoveryError)
        #expect("\(refusal)" == "\(DiscoveryError.notDiscovered(identifier: issued.bundleIdentifier))")
        // The synchronous initializer throws the same, typed.
        let fromThread = await offThePool { () -> ExtensionError? in
            do throws(ExtensionError) {
                _ = try AppExtensionProcess(configuration: .init(identity: forged))
                return nil
            } catch {
                return error
            }
        }
        guard case .discovery(.notDiscovered)? = fromThread else {
            Issue.record("the synchronous launch did not throw the discovery refusal: \(String(describing: fromThread))")
            return
        }
    }

    @Test("the synchronous launch from a task is refused as ExtensionError.blockingLaunchRefused")
    func blockingLaunchRefusedIsAnExtensionError() async {
        let identity = HostFixtures.identity()
        let outcome = await Task.detached { () -> ExtensionError? in
            do throws(ExtensionError) {
                _ = try AppExtensionProcess(configuration: .init(identity: identity))
                return nil
            } catch {
                return error
            }
        }.value
        guard case .blockingLaunchRefused? = outcome else {
            Issue.record("not refused: \(String(describing: outcome))")
            return
        }
        #expect("\(ExtensionError.blockingLaunchRefused)".contains("try await AppExtensionProcess(configuration:)"))
    }

    @Test("sends throw ExtensionError: a reply that does not decode is .coding, a closed connection its reason")
    func sendsThrowExtensionError() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        // The echo extension answers the JSON string "hello" with itself: not an Int.
        do {
            _ = try await connection.send("hello", expecting: Int.self)
            Issue.record("a string was decoded as an Int")
        } catch .coding(let why) {
            #expect(!why.isEmpty)
        } catch {
            Issue.record("not a coding failure: \(error)")
        }
        #expect(try await connection.send("again", expecting: String.self) == "again")
        connection.invalidate()
        for attempt in ["send", "sendOneWay", "sendOneWayWaitingForRoom"] {
            let failure: ExtensionError?
            do throws(ExtensionError) {
                switch attempt {
                case "send": _ = try await connection.send(HostFixtures.message("late"))
                case "sendOneWay": try connection.sendOneWay(HostFixtures.message("late"))
                default: try await connection.sendOneWayWaitingForRoom(HostFixtures.message("late"))
                }
                failure = nil
            } catch {
                failure = error
            }
            guard case .invalidated? = failure else {
                Issue.record("\(attempt) on an invalidated connection: \(String(describing: failure))")
                continue
            }
        }
    }
}
