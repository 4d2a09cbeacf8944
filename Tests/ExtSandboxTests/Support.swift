import ExtSandbox
import ExtensionCatalog
import Foundation
import Glibc
import SandboxRuntime
import Synchronization
import TestSupport

enum HostFixtures {
    static var productsDirectory: String { TestPaths.productsDirectory }
    static var policiesDirectory: String { TestPaths.policiesDirectory }

    /// The echo fixture under a policy level; a fresh identifier per call, so tests do not
    /// share processes unless they mean to.
    static func identity(level: String = "standard", name: String = "echo-\(UUID().uuidString)") -> AppExtensionIdentity {
        AppExtensionIdentity.developmentOnly(
            bundleIdentifier: name, executablePath: productsDirectory + "/xsb-echo-extension",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: policiesDirectory + "/\(level).yaml"))
    }

    /// A bundle executable in Python that speaks the wire protocol (docs/wire-protocol.md):
    /// `prelude` runs first (at the top level, with `os` imported), then every request is
    /// answered with the bytes of the Python expression `reply` (evaluated for each request).
    static func pythonExtension(reply: String, prelude: String = "") -> String {
        """
        #!/usr/bin/python3
        import os, socket, struct, threading
        def frame(kind, id=0, payload=b""):
            return struct.pack(">IBBHIQ", 16 + len(payload), kind, 0, 0, 0, id) + payload
        def read_exact(s, n):
            data = b""
            while len(data) < n:
                chunk = s.recv(n - len(data))
                if not chunk:
                    raise EOFError
                data += chunk
            return data
        def read_frame(s):
            (length,) = struct.unpack(">I", read_exact(s, 4))
            kind, _, _, _, id = struct.unpack(">BBHIQ", read_exact(s, 16))
            return kind, id, read_exact(s, length - 16)
        def answer():
            return \(reply)
        def serve(s):
            read_frame(s)
            s.sendall(frame(1, 0, struct.pack(">HI", 1, 1 << 20)))
            while True:
                kind, id, _ = read_frame(s)
                if kind == 2:
                    s.sendall(frame(3, id, answer()))
        \(prelude)
        control = socket.socket(fileno=3)
        control.sendall(frame(9, 0, os.environ["EXTSANDBOX_EXTENSION_IDENTIFIER"].encode()))
        while True:
            msg, fds, _, _ = socket.recv_fds(control, 20, 1)
            if not msg:
                os._exit(0)
            for fd in fds:
                threading.Thread(target=serve, args=(socket.socket(fileno=fd),), daemon=True).start()

        """
    }

    /// Approves the bundle at `bundle` (as it is now) in `world`'s approvals file and discovers
    /// it for the world's open point at `level`: the monitor (the caller cancels it) and the
    /// identity it issued.
    static func approveAndDiscover(_ bundle: String, identifier: String, in world: ExtensionWorld,
                                   level: String = "standard") async throws -> (AppExtensionPoint.Monitor, AppExtensionIdentity) {
        let approval = try ExtensionCatalog.currentApproval(of: try BundleValidator.validate(bundleAt: bundle).get())
        _ = try ApprovalStore(path: world.stateFile).update { $0.approvals[identifier] = approval }
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      securityLevel: TestPaths.policiesDirectory + "/\(level).yaml")
        let monitor = try await AppExtensionPoint.Monitor(
            points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations))
        guard let identity = monitor.identities.first(where: { $0.bundleIdentifier == identifier }) else {
            monitor.cancel()
            throw ExtensionWorld.CLIFailure(output: "\(identifier) was not discovered: \(monitor.state)")
        }
        return (monitor, identity)
    }

    static func text(_ message: ExtensionMessage) -> String { String(decoding: message.payload, as: UTF8.self) }
    static func message(_ text: String, fds: [FileDescriptor] = []) -> ExtensionMessage { ExtensionMessage(Array(text.utf8), fileDescriptors: fds) }

    static func processState(_ pid: pid_t) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(close, offsetBy: 2)...].split(separator: " ").first.map(String.init)
    }

    /// How long a wait for something that must happen may take by default: far more than it
    /// takes even on a loaded CI machine (an end is known seconds late there), since a passing
    /// wait returns as soon as it happens and only a failing one runs out the bound.
    static let patience: Double = 30

    /// How the sandbox ended, or nil if it still runs after `seconds`.
    static func exit(of sandbox: SandboxedProcess, within seconds: Double = patience) async -> Termination? {
        let result = Mutex<Termination?>(nil)
        let waiter = Task { let termination = await sandbox.waitForExit(); result.withLock { $0 = termination } }
        _ = await eventually(within: seconds) { result.withLock { $0 } != nil }
        waiter.cancel()
        return result.withLock { $0 }
    }

    /// Polls without blocking a thread: what it waits for runs on the same small pool.
    static func eventually(within seconds: Double = patience, _ condition: () -> Bool) async -> Bool {
        await Fixtures.eventually(within: seconds, condition)
    }
}

/// Collects lifecycle events and interruptions for assertions.
final class Recorder: Sendable {
    private let events = Mutex<[AppExtensionLifecycleEvent]>([])
    private let interruptions = Mutex<[String]>([])

    var onEvent: @Sendable (AppExtensionLifecycleEvent) -> Void { { [self] event in events.withLock { $0.append(event) } } }
    var onInterruption: @Sendable (Termination) -> Void { { [self] t in interruptions.withLock { $0.append("\(t)") } } }
    var recordedEvents: [AppExtensionLifecycleEvent] { events.withLock { $0 } }
    var recordedInterruptions: [String] { interruptions.withLock { $0 } }

    /// A configuration of `identity` (the echo fixture by default) whose lifecycle events and
    /// interruptions this recorder records.
    func configuration(_ identity: AppExtensionIdentity = HostFixtures.identity(), suspendAfter: Duration? = nil) -> AppExtensionProcess.Configuration {
        var configuration = AppExtensionProcess.Configuration(identity: identity, onInterruption: onInterruption, onEvent: onEvent)
        if let suspendAfter { configuration.suspendAfter = suspendAfter }
        return configuration
    }
}
