import Glibc
import SandboxSystem

/// A pseudo-terminal the CLI owns and relays, handed to the sandbox in place of the caller's
/// terminal (as `systemd-run --pty`, `su --pty` and `ssh -t` do).
///
/// The caller's terminal is shared with the caller's shell: whatever a program does to it
/// (window size, echo, line discipline, exclusive mode, job-control signals) outlives the run
/// or reaches the shell. The program gets the slave side of a new pseudo-terminal instead, as
/// its controlling terminal (so the terminal's Ctrl-C, Ctrl-\ and window size changes reach its
/// foreground process group, and a shell gets job control; a job-control stop of a program
/// that is not a shell is discarded by the kernel, its process group being orphaned). The
/// slave starts with the caller's terminal settings and window size; the caller's terminal
/// is put in raw mode for the run (when standard input is a terminal: keystrokes then pass
/// byte for byte) and its exact settings are restored on every way out the CLI controls:
/// the program's end, whatever ended it, a failed launch, SIGINT, SIGTERM, SIGHUP and SIGQUIT
/// (forwarded to the program, which the CLI outlives), job-control stops (restored while
/// stopped, raw again on continue) and the other signals that would end the CLI. Only SIGKILL
/// and a crash of the CLI itself leave the terminal raw (`stty sane` or `reset` repairs it).
final class PseudoTerminal {
    /// The side the CLI reads and writes (non-blocking; close-on-exec).
    let master: FileDescriptor
    /// The side the sandbox gets as its terminal stdio; the CLI's copy is closed once launched
    /// (nil from then on).
    private(set) var slave: FileDescriptor?
    /// The caller's terminal: where the settings and the window size come from.
    let callerTerminal: Int32
    /// The caller's standard input when it is a terminal: relayed to the master, in raw mode.
    let input: Int32?
    /// Where the master's output goes: the caller's first terminal among stdout, stderr, stdin.
    let output: Int32
    private let saved: termios

    /// Opens a pseudo-terminal that mirrors the caller's terminal `callerTerminal`.
    init(callerTerminal: Int32, input: Int32?, output: Int32) throws(StreamSetupError) {
        var settings = termios()
        guard tcgetattr(callerTerminal, &settings) == 0 else { throw StreamSetupError("tcgetattr on fd \(callerTerminal)") }
        guard let master = FileDescriptor(adopting: open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)) else {
            throw StreamSetupError("/dev/ptmx")
        }
        guard let slave = Self.openSlave(master) else {
            let error = StreamSetupError("the slave of /dev/ptmx")
            master.close()
            throw error
        }
        self.master = master
        self.slave = slave
        self.callerTerminal = callerTerminal
        self.input = input
        self.output = output
        self.saved = settings

        // Without input to relay, the caller's terminal stays as it is and does the output
        // processing (newline to CR-LF) itself; the slave must not do it a second time.
        var inner = settings
        if input == nil { inner.c_oflag &= ~tcflag_t(OPOST) }
        guard tcsetattr(slave.rawValue, TCSANOW, &inner) == 0, fcntl(master.rawValue, F_SETFL, O_NONBLOCK) == 0 else {
            // (The deinit runs too, and closes nothing twice.)
            let error = StreamSetupError("setting up the pseudo-terminal")
            master.close()
            slave.close()
            throw error
        }
        copyWindowSize()
    }

    deinit {
        master.close()
        closeSlave()
    }

    /// TIOCSPTLCK, TIOCGPTPEER and TIOCGPTN (function-like macros, not imported into Swift).
    private static let unlockRequest: UInt = 0x4004_5431
    private static let peerRequest: UInt = 0x5441
    private static let numberRequest: UInt = 0x8004_5430

    /// Unlocks the slave and opens it: through the master where the kernel can (Linux 4.13+,
    /// no path to race on), else by its number under /dev/pts.
    private static func openSlave(_ master: FileDescriptor) -> FileDescriptor? {
        var unlock: Int32 = 0
        guard ioctl(master.rawValue, unlockRequest, &unlock) == 0 else { return nil }
        let flags = O_RDWR | O_NOCTTY | O_CLOEXEC
        if let peer = FileDescriptor(adopting: ioctl(master.rawValue, peerRequest, flags)) { return peer }
        var number: UInt32 = 0
        guard ioctl(master.rawValue, numberRequest, &number) == 0 else { return nil }
        return FileDescriptor(adopting: open("/dev/pts/\(number)", flags))
    }

    /// The caller's window size onto the pseudo-terminal; when it changed, the kernel sends
    /// SIGWINCH to the program's foreground process group.
    func copyWindowSize() {
        var size = winsize()
        if ioctl(callerTerminal, UInt(TIOCGWINSZ), &size) == 0 {
            _ = ioctl(master.rawValue, UInt(TIOCSWINSZ), &size)
        }
    }

    /// Closes the CLI's copy of the slave: once the sandbox's copies are gone too, reading the
    /// master ends (EIO), which is how the relay knows the output is drained.
    func closeSlave() {
        slave?.close()
        slave = nil
    }

    /// Installs the signal handlers (window size, job control, fatal signals) and, when there
    /// is input to relay, puts the caller's terminal in raw mode. Undo with ``restore()``.
    func enterRawMode(wake: Int32) {
        var raw = saved
        cfmakeraw(&raw)
        let state = TerminalSignals.state
        state.pointee = TerminalSignals.State(fd: callerTerminal, saved: saved, raw: raw, wake: wake, raw_active: 0)
        TerminalSignals.install()
        guard input != nil else { return }
        state.pointee.raw_active = 1
        _ = retryingInterrupts { tcsetattr(callerTerminal, TCSADRAIN, &raw) }
    }

    /// Restores the caller's terminal settings exactly as they were, and the signal handlers.
    func restore() {
        let state = TerminalSignals.state
        if state.pointee.raw_active != 0 {
            state.pointee.raw_active = 0
            var settings = saved
            _ = retryingInterrupts { tcsetattr(callerTerminal, TCSADRAIN, &settings) }
        }
        TerminalSignals.uninstall()
        state.pointee.fd = -1
        state.pointee.wake = -1
    }
}
