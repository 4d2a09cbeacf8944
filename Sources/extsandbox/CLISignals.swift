import Dispatch
import Glibc
import SandboxRuntime
import Synchronization

// The CLI's own signal handlers, all of them: what `exec` forwards to the program, what ends
// `run` and `test`, and what keeps the caller's terminal sane while a pseudo-terminal relays.
// How a sandbox itself is signalled is SandboxRuntime's SandboxSignals.

/// `exec`'s forwarding: ``SandboxSignals/forwardedToProgram`` go to the sandbox's program (its
/// process group): it lives in its own session, so the terminal's Ctrl-C reaches only us.
enum ForwardedSignals {
    /// Forwards until each returned source is cancelled.
    static func forward(to process: SandboxedProcess) -> [DispatchSourceSignal] {
        SandboxSignals.forwardedToProgram.map { number in
            handledSignal(number) { Task { try? await process.signal(number) } }
        }
    }
}

/// A running dispatch source for `number`, whose default action is off (ignored): only
/// `handler` runs, on a dispatch queue.
private func handledSignal(_ number: Int32, _ handler: @escaping @Sendable () -> Void) -> DispatchSourceSignal {
    signal(number, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
    source.setEventHandler(handler: handler)
    source.resume()
    return source
}

/// SIGINT and SIGTERM during `run` or `test`: `stop` runs once (on a dispatch queue) with the
/// signal's number, and the process exits with 128 + the signal after it. The terminal's Ctrl-C
/// reaches only the CLI: the sandbox's processes are in a session of their own.
enum StopSignals {
    /// Kept alive for the process's life; written once, by ``install(_:)`` on the main task.
    nonisolated(unsafe) private static var sources: [DispatchSourceSignal] = []
    private static let stopping = Atomic<Bool>(false)

    static func install(_ stop: @escaping @Sendable (_ signal: Int32) async -> Void) {
        let installed = [SIGINT, SIGTERM].map { number in
            handledSignal(number) {
                guard !stopping.exchange(true, ordering: .relaxed) else { return }
                Task {
                    await stop(number)
                    _exit(128 + number)
                }
            }
        }
        sources = installed
    }

    /// Whether a stop has begun (the main flow then leaves the exit to it).
    static var isStopping: Bool { stopping.load(ordering: .relaxed) }
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

    static func uninstall() {
        for number in [SIGWINCH, SIGCONT] + fatal + stops { signal(number, SIG_DFL) }
    }
}
