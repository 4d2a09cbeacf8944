import Dispatch
import Glibc
import Synchronization

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
