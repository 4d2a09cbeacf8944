import Glibc
import SandboxSystem

/// Whether a sandbox's program is still running or on its way out, as the kernel says now.
///
/// A program that dies closes its sockets a moment before its end is known to the host: the
/// kernel marks the exiting task (`PF_EXITING`) before it closes its files, and its init reaps it
/// and reports the exit only later (under load, seconds later). A socket's hang-up is therefore
/// read together with this state: an ending program's hang-up waits for the real reason (killed,
/// crashed); a running program closed its socket on purpose.
public enum ProgramLiveness: Sendable, Equatable {
    /// The program runs and is not exiting.
    case running
    /// The program or the whole sandbox is exiting, or has exited: its end is on its way.
    case ending
    /// /proc could not tell (not mounted, or the sandbox's entries are not readable).
    case unknown
}

extension SandboxedProcess {
    /// The kernel's `PF_EXITING` task flag (include/linux/sched.h): set when a task begins to
    /// exit, before its files are closed.
    static let exitingTaskFlag: UInt = 0x0000_0004

    /// Where the sandbox's program is in its life, read from /proc (no system call to the sandbox).
    public func programLiveness() -> ProgramLiveness {
        if !isRunning { return .ending }
        switch Self.taskState(pid) {
        case .gone, .exiting: return .ending
        case .unreadable: return .unknown
        case .alive: break
        }
        // The program is the init's child whose pid inside is `payloadPIDInside`; orphans the init
        // adopted are its children too.
        guard payloadPIDInside > 0 else { return .unknown }
        guard let children = SystemFiles.text("/proc/\(pid)/task/\(pid)/children") else {
            return Self.taskState(pid) == .alive ? .unknown : .ending
        }
        for child in children.split(whereSeparator: \.isWhitespace).compactMap({ pid_t($0) }) {
            guard Self.innermostPID(child) == payloadPIDInside else { continue }
            switch Self.taskState(child) {
            case .alive: return .running
            case .gone, .exiting: return .ending
            case .unreadable: return .unknown
            }
        }
        // Not among the init's children: reaped already, its EXIT report is on its way.
        return .ending
    }

    enum TaskState: Equatable { case alive, exiting, gone, unreadable }

    /// A process's state: exiting only when every one of its threads is (a main thread that
    /// called `pthread_exit` is a zombie flagged `PF_EXITING` while the others run on).
    static func taskState(_ pid: pid_t) -> TaskState {
        let leader = threadState("/proc/\(pid)/stat")
        guard leader == .exiting else { return leader }
        guard let threads = SystemFiles.entries("/proc/\(pid)/task") else { return .exiting }
        for thread in threads where thread != "\(pid)" {
            if threadState("/proc/\(pid)/task/\(thread)/stat") == .alive { return .alive }
        }
        return .exiting
    }

    /// One thread's state from its stat file: exiting when flagged `PF_EXITING`, a zombie or dead.
    static func threadState(_ path: String) -> TaskState {
        switch SystemFiles.bytes(path, limit: 4096) {
        case .failure(let error): return error.code == ESRCH || error.code == ENOENT ? .gone : .unreadable
        case .success(let bytes):
            return parseStat(bytes).map { state, flags in
                state == UInt8(ascii: "Z") || state == UInt8(ascii: "X") || flags & exitingTaskFlag != 0 ? .exiting : .alive
            } ?? .unreadable
        }
    }

    /// The state letter and the flags of a /proc/PID/stat line: fields 3 and 9, counted after the
    /// command name's closing parenthesis (the name itself may hold spaces and parentheses).
    static func parseStat(_ bytes: [UInt8]) -> (state: UInt8, flags: UInt)? {
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
        // fields[0] is the state (field 3), fields[6] the flags (field 9).
        guard fields.count > 6, let state = fields[0].first,
              let flags = UInt(String(decoding: fields[6], as: UTF8.self)) else { return nil }
        return (state, flags)
    }

    /// The last pid of the `NSpid:` line of /proc/PID/status: the pid inside the sandbox.
    static func innermostPID(_ pid: pid_t) -> pid_t? {
        guard let status = SystemFiles.text("/proc/\(pid)/status", limit: 16384) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("NSpid:") {
            return line.split(whereSeparator: \.isWhitespace).last.flatMap { pid_t($0) }
        }
        return nil
    }
}
