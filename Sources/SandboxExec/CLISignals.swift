import Glibc
import SandboxRuntime
import SandboxSystem
import Synchronization

// `exec`'s signal handlers: what it forwards to the program, and what keeps the caller's terminal
// sane while a pseudo-terminal relays (`run` and `test` also use the latter; what ends them is
// the CLI's StopSignals). How a sandbox itself is signalled is SandboxRuntime's SandboxSignals.

/// `exec`'s forwarding: ``SandboxSignals/forwardedToProgram`` go to the sandbox's program (its
/// process group): it lives in its own session, so the terminal's Ctrl-C reaches only us.
///
/// Without Dispatch signal sources (they start Dispatch's manager thread, one more thread to
/// wake in every run): a plain handler writes the signal's number to a pipe, and the
/// supervisor's monitor thread, which watches the pipe, tells the sandbox's init. So a run that
/// gets no signal costs one pipe and no thread.
enum ForwardedSignals {
    /// The pipe's ends (read, write), made once and kept for the process's life: a handler may
    /// still be writing on another thread when forwarding stops, so the write end never closes
    /// (its number could then belong to another file). The handlers reach it through this
    /// pointer, set up before they are installed (its lazy initialization is done by then, so a
    /// handler's read of it is a plain load; no allocation there).
    nonisolated(unsafe) private static let pipe: UnsafeMutablePointer<(read: Int32, write: Int32)> = {
        let pointer = UnsafeMutablePointer<(read: Int32, write: Int32)>.allocate(capacity: 1)
        pointer.initialize(to: (-1, -1))
        return pointer
    }()

    /// Forwarding under way; ``stop()`` ends it.
    struct Forwarding {
        fileprivate let monitor: EventMonitor
        fileprivate let descriptor: FileDescriptor
        fileprivate let token: UInt64

        /// Stops forwarding: the signals are ignored from now on (the program has ended; the
        /// CLI exits with its status).
        func stop() {
            for number in SandboxSignals.forwardedToProgram { signal(number, SIG_IGN) }
            monitor.remove(fd: descriptor, token: token)
        }
    }

    /// Forwards until the returned forwarding is stopped. Throws what failed: the pipe, or the
    /// monitor's watch of it.
    static func forward(to process: SandboxedProcess, on monitor: EventMonitor) throws(StreamSetupError) -> Forwarding {
        if pipe.pointee.read < 0 {
            let ends = try SandboxStreams.makePipe(for: "forwarding signals")
            for end in ends { _ = fcntl(end, F_SETFL, O_NONBLOCK) }
            pipe.pointee = (ends[0], ends[1])
        }
        guard let descriptor = FileDescriptor(borrowing: pipe.pointee.read) else { throw StreamSetupError("forwarding signals") }
        let token: UInt64
        do throws(EventMonitor.Failure) {
            token = try monitor.add(fd: descriptor) { _ in
                var numbers = [UInt8](repeating: 0, count: 64)
                while true {
                    let count = read(descriptor.rawValue, &numbers, numbers.count)
                    guard count > 0 else { return }
                    for number in numbers.prefix(count) { process.signalWithoutWaiting(Int32(number)) }
                }
            }
        } catch {
            errno = error.errorNumber
            throw StreamSetupError("forwarding signals: \(error.operation)")
        }
        for number in SandboxSignals.forwardedToProgram {
            signal(number) { number in
                let saved = errno  // the interrupted code may be about to read it
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(ForwardedSignals.pipe.pointee.write, &byte, 1)
                errno = saved
            }
        }
        return Forwarding(monitor: monitor, descriptor: descriptor, token: token)
    }
}

/// Unblocks the signals `exec` handles (the forwarded ones and the terminal relay's) on the
/// calling thread, and so on every thread it starts from then on: call it first, on the main
/// thread. A caller may start the CLI with them blocked (a thread of Swift's concurrency pool
/// that spawns it has them all blocked, and the mask is inherited across `execve`); blocked,
/// their handlers would never run and Ctrl-C would not reach the program.
func unblockHandledSignals() {
    var handled = sigset_t()
    sigemptyset(&handled)
    for number in SandboxSignals.forwardedToProgram + TerminalSignals.handled { sigaddset(&handled, number) }
    pthread_sigmask(SIG_UNBLOCK, &handled, nil)
}

/// The CLI's signal handlers while a pseudo-terminal relays: they run on any thread at any
/// time, so they only make async-signal-safe calls, on state reached through a pointer set up
/// before they are installed (no Swift global access, no allocation).
enum TerminalSignals {
    struct State {
        var fd: Int32
        var saved: termios
        var raw: termios
        /// The relay's wake-up pipe: "W" asks it to copy the window size.
        var wake: Int32
        /// Whether the caller's terminal is in raw mode now (a plain word for the handlers).
        var raw_active: Int32
    }

    /// Allocated once and never freed: the handlers may run at any moment.
    nonisolated(unsafe) static let state: UnsafeMutablePointer<State> = {
        let pointer = UnsafeMutablePointer<State>.allocate(capacity: 1)
        pointer.initialize(to: State(fd: -1, saved: termios(), raw: termios(), wake: -1, raw_active: 0))
        return pointer
    }()

    /// Signals whose default action would end the CLI and that the CLI does not forward to
    /// the program (``SandboxSignals/forwardedToProgram`` are: the CLI outlives them).
    static let fatal: [Int32] = [SIGALRM, SIGUSR1, SIGUSR2, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO]
    static let stops: [Int32] = [SIGTSTP, SIGTTIN, SIGTTOU]

    static func install() {
        _ = state  // set up before any handler can run
        signal(SIGWINCH) { _ in
            let state = TerminalSignals.state
            var byte = UInt8(ascii: "W")
            _ = write(state.pointee.wake, &byte, 1)
        }
        // Continued after a stop the CLI did not see coming (SIGSTOP): the caller's shell may
        // have put its own settings back meanwhile.
        signal(SIGCONT) { _ in
            let state = TerminalSignals.state
            if state.pointee.raw_active != 0 { _ = tcsetattr(state.pointee.fd, TCSANOW, &state.pointee.raw) }
            var byte = UInt8(ascii: "W")
            _ = write(state.pointee.wake, &byte, 1)
        }
        for number in fatal {
            signal(number) { number in
                let state = TerminalSignals.state
                if state.pointee.raw_active != 0 { _ = tcsetattr(state.pointee.fd, TCSANOW, &state.pointee.saved) }
                signal(number, SIG_DFL)
                raise(number)  // blocked while this handler runs: delivered, with its default action, on return
            }
        }
        for number in stops {
            signal(number) { _ in
                let state = TerminalSignals.state
                let wasRaw = state.pointee.raw_active != 0
                if wasRaw { _ = tcsetattr(state.pointee.fd, TCSANOW, &state.pointee.saved) }
                kill(getpid(), SIGSTOP)
                // Continued (the SIGCONT handler ran too; in the background, setting raw mode
                // stops us again until the shell brings us to the foreground).
                if wasRaw && state.pointee.raw_active != 0 { _ = tcsetattr(state.pointee.fd, TCSANOW, &state.pointee.raw) }
            }
        }
    }

    /// Every signal ``install()`` handles.
    static var handled: [Int32] { [SIGWINCH, SIGCONT] + fatal + stops }

    static func uninstall() {
        for number in handled { signal(number, SIG_DFL) }
    }
}
