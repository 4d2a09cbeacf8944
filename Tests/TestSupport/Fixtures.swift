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

    /// Runs a command (optionally as `nobody` through setpriv) to its end and collects its output.
    /// Suspends meanwhile; the waiting happens on threads of its own (see ``offThePool(_:)``).
    public static func run(_ arguments: [String], as caller: Caller = .root, environment: [String: String]? = nil,
                           standardInput: String? = nil) async throws -> Output {
        // An executable a test has just copied can be refused for up to a moment with ETXTBSY: a
        // process another test forks meanwhile holds a copy of the write descriptor until it execs.
        var attempt = 1
        while true {
            do {
                return try await start(arguments, as: caller, environment: environment, standardInput: standardInput).output()
            } catch where attempt < 100 && isTextFileBusy(error) {
                attempt += 1
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Writes `bytes` to `path` (created or truncated, then given `mode`) through a close-on-exec
    /// descriptor. Foundation's writers and `copyItem` may open without `O_CLOEXEC`: a process
    /// another test starts meanwhile then keeps the write descriptor, and exec'ing the file fails
    /// with ETXTBSY for as long as that process lives (a fresh-clone CI run: `extsandbox run` of a
    /// bundle installed seconds earlier).
    public static func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
            offset += written
        }
        guard fchmod(fd, mode) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    /// Whether `error` (from `Process.run`) is ETXTBSY.
    static func isTextFileBusy(_ error: any Error) -> Bool {
        let error = error as NSError
        if error.domain == NSPOSIXErrorDomain { return error.code == Int(ETXTBSY) }
        return (error.userInfo[NSUnderlyingErrorKey] as? NSError).map(isTextFileBusy) ?? false
    }

    /// Starts a command (optionally as `nobody` through setpriv); ``StartedProcess/output()`` waits
    /// for it. (Starting several first and then waiting runs them concurrently.)
    public static func start(_ arguments: [String], as caller: Caller = .root, environment: [String: String]? = nil,
                             standardInput: String? = nil) throws -> StartedProcess {
        let process = Process()
        var argv = arguments
        if caller == .nobody {
            argv = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + argv
        }
        process.executableURL = URL(fileURLWithPath: argv[0])
        process.arguments = Array(argv.dropFirst())
        if let environment { process.environment = environment }
        let out = Pipe(), err = Pipe(), input = Pipe()
        // Close-on-exec (Pipe's are not): a process another test spawns meanwhile without closing
        // what it inherits (an exit test's child, a posix_spawn'd fixture) would otherwise keep
        // the write ends open, and the reads to end of file would wait for it to end too. The
        // child gets its ends as 0, 1 and 2 all the same (dup2 clears the flag).
        for pipe in [out, err, input] {
            for descriptor in [pipe.fileHandleForReading.fileDescriptor, pipe.fileHandleForWriting.fileDescriptor] {
                _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            }
        }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = standardInput == nil ? FileHandle.nullDevice : input
        try process.run()
        if let standardInput {
            // Small texts only: it must fit the pipe's buffer (64 KiB) before the child reads it.
            input.fileHandleForWriting.write(Data(standardInput.utf8))
            try input.fileHandleForWriting.close()
        }
        return StartedProcess(process: process, stdout: out, stderr: err)
    }

    /// `extsandbox exec --policy standard.yaml [options] -- argv…` (see ``policyPath(_:for:)``)
    public static func exec(_ argv: [String], options: [String] = [], as caller: Caller = .root) async throws -> Output {
        try await run([cli, "exec", "--policy", policyPath(for: caller)] + options + ["--"] + argv, as: caller)
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

    /// Polls `condition` every 10 ms until it holds or `seconds` pass, without holding a pool
    /// thread meanwhile (what it waits for may need one). By default 30 s: far more than what it
    /// waits for takes on a loaded CI machine (a sandbox's end is known seconds late there); a
    /// condition that holds returns at once, only a failing wait runs out the bound.
    public static func eventually(within seconds: Double = 30, _ condition: () throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return try condition()
    }
}

/// A process started by ``Fixtures/start(_:as:environment:standardInput:)``, its output pipes
/// not yet read.
public struct StartedProcess: Sendable {
    /// The started process (for its pid, or to signal it).
    public let process: Process
    let stdout: Pipe
    let stderr: Pipe

    /// Waits for the process to end and returns what it wrote: both pipes are read to their end
    /// concurrently (so that neither fills up and stalls the child), each on a thread of its own,
    /// as is the wait; the caller suspends meanwhile. A process killed by a signal has the
    /// shell's status, 128 + the signal.
    public func output() async -> Fixtures.Output {
        let (stdout, stderr, process) = (stdout, stderr, process)
        async let outData = offThePool { stdout.fileHandleForReading.readDataToEndOfFile() }
        async let errData = offThePool { stderr.fileHandleForReading.readDataToEndOfFile() }
        let (out, err) = await (outData, errData)
        await offThePool { process.waitUntilExit() }
        return Fixtures.Output(
            status: process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus,
            stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
    }
}
