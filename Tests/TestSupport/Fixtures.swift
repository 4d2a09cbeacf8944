import Foundation
import Glibc

/// Runs the package's executables (found by ``TestPaths``) as the tests need them: as root or
/// as `nobody`, with their output collected.
public enum Fixtures {
    /// The built probe fixture (``TestPaths/probe``).
    public static var probe: String { TestPaths.probe }
    /// The built CLI (``TestPaths/cli``).
    public static var cli: String { TestPaths.cli }

    /// The checkout's Policies directory.
    public static var policiesDirectory: String { TestPaths.policiesDirectory }

    public static var standardPolicyPath: String { TestPaths.standardPolicyPath }

    /// The shipped policy `level` as `caller` runs it. Root uses it as shipped. Nobody has no
    /// writable memory cgroup on a cgroup v1 host (nor on v2 without delegation), where a policy's
    /// whole-sandbox memory limit fails the launch: it gets the same policy with the explicit
    /// per-process opt-in, written once under the checkout's .build (policies under /tmp are
    /// refused) in a directory owned by root, mode 0755.
    public static func policyPath(_ level: String = "standard", for caller: Caller) -> String {
        caller == .root ? policiesDirectory + "/\(level).yaml" : perProcessPolicies + "/\(level).yaml"
    }

    public static let perProcessPolicies: String = {
        do {
            let dir = try TestPaths.makePolicyDirectory("per-process").path
            for level in ["standard", "restricted", "hardened"] {
                try "version: 1\nextends: \(policiesDirectory)/\(level).yaml\nlimits:\n  memory-scope: per-process\n"
                    .write(toFile: dir + "/\(level).yaml", atomically: true, encoding: .utf8)
                chmod(dir + "/\(level).yaml", 0o644)
            }
            return dir
        } catch {
            fatalError("cannot write the per-process test policies: \(error)")
        }
    }()

    /// Who runs the supervisor: root (this test process's own user) or an unprivileged user.
    /// (Test arguments of this type show as "root" and "nobody": the case names.)
    public enum Caller: String, CaseIterable, Sendable {
        case root, nobody
    }

    public struct Output: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs a command (optionally as `nobody` through setpriv) and collects its output.
    public static func run(_ arguments: [String], as caller: Caller = .root, environment: [String: String]? = nil) throws -> Output {
        let process = Process()
        var argv = arguments
        if caller == .nobody {
            argv = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + argv
        }
        process.executableURL = URL(fileURLWithPath: argv[0])
        process.arguments = Array(argv.dropFirst())
        if let environment { process.environment = environment }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read both pipes concurrently so neither fills up and stalls the child.
        let errData = LockedData()
        let reader = Thread { errData.set(err.fileHandleForReading.readDataToEndOfFile()) }
        reader.start()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        while !errData.isSet { usleep(1000) }
        return Output(
            status: process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus,
            stdout: String(decoding: outData, as: UTF8.self), stderr: String(decoding: errData.value, as: UTF8.self))
    }

    /// `extsandbox exec --policy standard.yaml [options] -- argv…` (see ``policyPath(_:for:)``)
    public static func exec(_ argv: [String], options: [String] = [], as caller: Caller = .root) throws -> Output {
        try run([cli, "exec", "--policy", policyPath(for: caller)] + options + ["--"] + argv, as: caller)
    }

    /// Fds open in this process, for leak checks.
    public static func openFileDescriptors() -> Set<Int32> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return Set(names.compactMap { Int32($0) })
    }

    /// The one-letter state of a process ("R", "S", "T", "Z", …), nil when it is gone.
    public static func processState(_ pid: pid_t) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(close, offsetBy: 2)...].split(separator: " ").first.map(String.init)
    }

    /// Polls `condition` until it holds or `seconds` pass.
    public static func eventually(within seconds: Double = 5, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }
}

final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    private var done = false
    func set(_ value: Data) { lock.lock(); data = value; done = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return done }
    var value: Data { lock.lock(); defer { lock.unlock() }; return data }
}
