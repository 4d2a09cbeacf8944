import Foundation
import Glibc
import SandboxPolicy
import SandboxRuntime
import TestSupport
import Testing

/// Locates the package's fixture executables next to the test runner, and runs them.
enum Fixtures {
    /// The directory holding the test runner, where SwiftPM also puts the package's executables.
    static let productsDirectory = TestPaths.productsDirectory(containing: "xsb-probe")

    static var probe: String { productsDirectory + "/xsb-probe" }
    static var cli: String { productsDirectory + "/extsandbox" }

    /// The checkout's Policies directory.
    static let policiesDirectory = TestPaths.policiesDirectory

    static var standardPolicyPath: String { policiesDirectory + "/standard.yaml" }

    /// The shipped policy `level` as `caller` runs it. Root uses it as shipped. Nobody has no
    /// writable memory cgroup on a cgroup v1 host (nor on v2 without delegation), where a policy's
    /// whole-sandbox memory limit fails the launch: it gets the same policy with the explicit
    /// per-process opt-in, written once under the checkout's .build (policies under /tmp are
    /// refused) in a directory owned by root, mode 0755.
    static func policyPath(_ level: String = "standard", for caller: Caller) -> String {
        caller == .root ? policiesDirectory + "/\(level).yaml" : perProcessPolicies + "/\(level).yaml"
    }

    static let perProcessPolicies: String = {
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

    static func standardPolicy() throws -> Policy {
        try PolicyLoader.load(file: standardPolicyPath)
    }

    /// Who runs the supervisor: root (this test process's own user) or an unprivileged user.
    enum Caller: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case root, nobody
        var testDescription: String { rawValue }
    }

    struct Output: Sendable {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs a command (optionally as `nobody` through setpriv) and collects its output.
    static func run(_ arguments: [String], as caller: Caller = .root, environment: [String: String]? = nil) throws -> Output {
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
    static func exec(_ argv: [String], options: [String] = [], as caller: Caller = .root) throws -> Output {
        try run([cli, "exec", "--policy", policyPath(for: caller)] + options + ["--"] + argv, as: caller)
    }

    /// A configuration running the probe under the standard policy, output into `pipe`.
    static func probeConfiguration(_ arguments: [String], stdout: Int32? = nil) throws -> SandboxConfiguration {
        let policy = try standardPolicy()
        return SandboxConfiguration(
            executable: probe, arguments: ["xsb-probe"] + arguments,
            environment: SandboxEnvironment.compose(policy: policy, caller: ProcessInfo.processInfo.environment),
            policy: policy, standardInput: .null,
            standardOutput: stdout.map { .fileDescriptor($0) } ?? .null)
    }

    /// Fds open in this process, for leak checks.
    static func openFileDescriptors() -> Set<Int32> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return Set(names.compactMap { Int32($0) })
    }

    /// The one-letter state of a process ("R", "S", "T", "Z", …), nil when it is gone.
    static func processState(_ pid: pid_t) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(close, offsetBy: 2)...].split(separator: " ").first.map(String.init)
    }

    /// Polls `condition` until it holds or `seconds` pass.
    static func eventually(within seconds: Double = 5, _ condition: () -> Bool) -> Bool {
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

/// A pipe whose read end collects what the sandbox writes.
final class OutputPipe: @unchecked Sendable {
    let readFD: Int32
    let writeFD: Int32

    init() {
        var fds: [Int32] = [0, 0]
        precondition(pipe(&fds) == 0)
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        readFD = fds[0]
        writeFD = fds[1]
    }

    /// Reads until a line containing `text` arrived or `seconds` passed.
    func waitFor(_ text: String, seconds: Double = 10) -> String {
        var collected = ""
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline && !collected.contains(text) {
            var p = pollfd(fd: readFD, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 100) > 0 else { continue }
            let n = read(readFD, &buffer, buffer.count)
            if n <= 0 { break }
            collected += String(decoding: buffer[0..<n], as: UTF8.self)
        }
        return collected
    }

    private var writeOpen = true
    func closeWriteEnd() {
        if writeOpen { close(writeFD) }
        writeOpen = false
    }
    deinit {
        close(readFD)
        closeWriteEnd()
    }
}
