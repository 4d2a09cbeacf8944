import Glibc
import SandboxRuntime
import SandboxSystem

/// Why the sandbox's standard streams could not be set up (the launch then does not happen).
struct StreamSetupError: Error, CustomStringConvertible {
    let description: String
    /// `what` failed with the current errno.
    init(_ what: String) {
        let number = errno
        description = "\(what): \(String(cString: strerror(number)))"
    }
}

/// The standard streams `extsandbox exec` hands to the sandbox: never the caller's own open
/// file descriptions.
///
/// A descriptor passed as-is shares its open file description, and with it the file status
/// flags, with the caller and every other process holding it: O_NONBLOCK set inside would stay
/// on the caller's shell's stdin, and a terminal would be the caller's terminal. So:
/// - a terminal is replaced by a pseudo-terminal the CLI relays (``PseudoTerminal``);
/// - a regular file, directory, FIFO or pipe, and /dev/null, zero, full, random and urandom,
///   are reopened through /proc/self/fd with the same access mode and status flags; a regular
///   file's offset is carried in at the start and back out at the end, as if it were shared;
/// - anything else (a socket, a device, an eventfd…), and whatever cannot be reopened, is
///   relayed through a pipe (``StreamRelay``). Of a relayed input, the CLI reads ahead what
///   the pipe holds: bytes the program never read are lost to the caller's next reader.
/// Streams that shared one description share one here too (`>file 2>&1` stays one offset).
/// With no terminal and no relayed stream, no thread starts.
final class SandboxStreams {
    /// What the program gets as 0, 1, 2 (nil: /dev/null, the CLI's own stream is closed).
    private(set) var sandboxFDs: [Int32?] = [nil, nil, nil]
    private(set) var terminal: PseudoTerminal?
    /// The CLI's copies of what only the sandbox needs: closed once it is launched.
    private var handedIn: [Int32] = []
    /// Reopened regular files: (the caller's fd, the sandbox's description), kept for the offset.
    private var positioned: [(caller: Int32, own: Int32)] = []
    private var channels: [StreamRelay.Channel] = []
    private var relay: StreamRelay?

    /// Whether the program gets a terminal (the relay's pseudo-terminal).
    var hasTerminal: Bool { terminal != nil }

    /// Sets up the streams for the CLI's own 0, 1 and 2.
    init() throws(StreamSetupError) {
        do {
            try setUp()
        } catch {
            abandon()
            throw error
        }
    }

    private func setUp() throws(StreamSetupError) {
        var info: [stat] = Array(repeating: stat(), count: 3)
        var flags: [Int32] = [-1, -1, -1]
        for fd in 0..<3 where fstat(Int32(fd), &info[fd]) == 0 { flags[fd] = fcntl(Int32(fd), F_GETFL) }
        let isTerminal = (0..<3).map { flags[$0] >= 0 && isatty(Int32($0)) == 1 }
        if let first = isTerminal.firstIndex(of: true) {
            let output = [1, 2, 0].first { isTerminal[$0] }!
            terminal = try PseudoTerminal(
                callerTerminal: Int32(first), input: isTerminal[0] ? 0 : nil, output: Int32(output))
        }
        /// (device, inode, access mode, input?) of each description already given its own.
        var done: [(device: UInt, inode: UInt, mode: Int32, input: Bool, fd: Int32)] = []
        for fd in 0..<3 where flags[fd] >= 0 {
            if isTerminal[fd], let terminal {
                sandboxFDs[fd] = terminal.slave?.rawValue  // open until launched()
                continue
            }
            let mode = flags[fd] & O_ACCMODE, input = fd == 0
            let device = UInt(info[fd].st_dev), inode = UInt(info[fd].st_ino)
            if let same = done.first(where: { $0.device == device && $0.inode == inode && $0.mode == mode && $0.input == input }) {
                sandboxFDs[fd] = same.fd
                continue
            }
            let own = try ownDescription(for: Int32(fd), info: info[fd], flags: flags[fd])
            sandboxFDs[fd] = own
            done.append((device, inode, mode, input, own))
        }
        if let terminal {
            if let input = terminal.input {
                channels.append(.init(source: input, destination: terminal.master.rawValue, direction: .towardSandbox))
            }
            channels.append(.init(source: terminal.master.rawValue, destination: terminal.output, direction: .fromSandbox))
        }
        if !channels.isEmpty { relay = try StreamRelay(channels: channels, terminal: terminal) }
    }

    /// A description of the sandbox's own for the caller's `fd`: reopened where that is
    /// harmless, else the far end of a relay pipe.
    private func ownDescription(for fd: Int32, info: stat, flags: Int32) throws(StreamSetupError) -> Int32 {
        if Self.reopenable(info), let reopened = Self.reopen(fd, flags: flags) {
            if info.st_mode & S_IFMT == S_IFREG {
                let offset = lseek(fd, 0, SEEK_CUR)
                if offset >= 0 { _ = lseek(reopened, offset, SEEK_SET) }
                positioned.append((fd, reopened))
                if fd == 2 { diagnosticsDescriptor.store(reopened, ordering: .releasing) }
            } else {
                handedIn.append(reopened)
            }
            return reopened
        }
        let ends = try Self.makePipe(for: "fd \(fd)")
        let (sandboxEnd, relayEnd) = fd == 0 ? (ends[0], ends[1]) : (ends[1], ends[0])
        handedIn.append(sandboxEnd)
        _ = fcntl(relayEnd, F_SETFL, O_NONBLOCK)  // the relay's own description
        channels.append(fd == 0
            ? .init(source: fd, destination: relayEnd, direction: .towardSandbox, ownsDestination: true)
            : .init(source: relayEnd, destination: fd, direction: .fromSandbox, ownsSource: true))
        return sandboxEnd
    }

    /// A close-on-exec pipe (no sandbox is being cloned while the CLI makes these).
    static func makePipe(for purpose: String) throws(StreamSetupError) -> [Int32] {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw StreamSetupError("pipe for \(purpose)") }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return ends
    }

    /// Kinds that open without side effects: files, directories, FIFOs and pipes, and the
    /// memory devices that are pure sources or sinks (never a tape, modem or watchdog).
    private static func reopenable(_ info: stat) -> Bool {
        switch info.st_mode & S_IFMT {
        case S_IFREG, S_IFDIR, S_IFIFO:
            return true
        case S_IFCHR:
            let device = UInt64(info.st_rdev)
            let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff)
            let minor = (device & 0xff) | ((device >> 12) & ~0xff)
            return major == 1 && [3, 5, 7, 8, 9].contains(minor)  // null, zero, full, random, urandom
        default:
            return false
        }
    }

    /// Opens `fd`'s file anew with its access mode and status flags; nil when it cannot be.
    private static func reopen(_ fd: Int32, flags: Int32) -> Int32? {
        // O_NONBLOCK: a FIFO's open must not wait for a partner; the caller's flags follow.
        let reopened = open("/proc/self/fd/\(fd)", (flags & O_ACCMODE) | O_NOCTTY | O_CLOEXEC | O_NONBLOCK)
        guard reopened >= 0 else { return nil }
        guard fcntl(reopened, F_SETFL, flags & (O_APPEND | O_NONBLOCK)) == 0 else {
            close(reopened)
            return nil
        }
        return reopened
    }

    /// The configuration's stream for the program's `fd`.
    func stream(_ fd: Int) -> SandboxConfiguration.StandardStream {
        // Borrowed: this object's bookkeeping closes them (``launched()``, ``finish()``).
        sandboxFDs[fd].flatMap(FileDescriptor.init(borrowing:)).map { .fileDescriptor($0) } ?? .null
    }

    /// After the launch: drops the CLI's copies of what the sandbox got, puts the caller's
    /// terminal in raw mode and starts relaying.
    func launched() throws(StreamSetupError) {
        for fd in handedIn { close(fd) }
        handedIn = []
        terminal?.closeSlave()
        guard let relay else { return }
        signal(SIGPIPE, SIG_IGN)  // a closed destination is an error to handle, not the CLI's end
        terminal?.enterRawMode(wake: relay.wakeWrite)
        try relay.start()
    }

    /// After the program's end (or instead of a launch): drains its output, restores the
    /// caller's terminal and carries file offsets back. Safe to call more than once.
    func finish() {
        relay?.finish()
        terminal?.restore()  // before the relay's wake-up pipe closes: the handlers write to it
        relay = nil
        terminal = nil
        diagnosticsDescriptor.store(2, ordering: .releasing)
        for (caller, own) in positioned {
            let offset = lseek(own, 0, SEEK_CUR)
            if offset >= 0 { _ = lseek(caller, offset, SEEK_SET) }
            close(own)
        }
        positioned = []
        for fd in handedIn { close(fd) }
        handedIn = []
    }

    /// The launch failed: nothing ran, release everything.
    func abandon() {
        for channel in channels {
            if channel.ownsSource { close(channel.source) }
            if channel.ownsDestination { close(channel.destination) }
        }
        channels = []
        relay = nil
        diagnosticsDescriptor.store(2, ordering: .releasing)
        for (_, own) in positioned { close(own) }
        positioned = []
        for fd in handedIn { close(fd) }
        handedIn = []
        terminal = nil
    }
}
