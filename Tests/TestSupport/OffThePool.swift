import Foundation
import Glibc

/// Runs blocking `work` (waiting for a process, reading a pipe to its end, polling) on a thread of
/// its own and suspends the caller until it returns.
///
/// Swift Testing runs every test on the cooperative pool, which has one thread per core: two in
/// CI. A test that blocks one of those threads for seconds also stops the tasks of every other
/// test that runs meanwhile, including the tasks a launch needs to see its sandbox's READY or
/// exit; a 0.4 s lifecycle test has been seen to take 88 s that way. Blocking work goes here.
public func offThePool<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
    try await withCheckedThrowingContinuation { continuation in
        startThread { continuation.resume(with: Result { try work() }) }
    }
}

/// ``offThePool(_:)`` for work that cannot fail.
public func offThePool<Value: Sendable>(_ work: @escaping @Sendable () -> Value) async -> Value {
    await withCheckedContinuation { continuation in
        startThread { continuation.resume(returning: work()) }
    }
}

/// Starts a thread that, like the cooperative pool's, blocks the asynchronous signals (the
/// process's SIGCHLD, a terminal's SIGWINCH, …; the main thread takes them): delivered to a thread
/// blocked in read(2), a signal whose handler has no SA_RESTART ends the read with EINTR, which
/// FileHandle's reads turn into a crash.
func startThread(name: String? = nil, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
    let thread = Thread {
        var signals = sigset_t()
        sigfillset(&signals)
        // The synchronous ones stay deliverable to the thread that causes them (as libdispatch does).
        for signal in [SIGILL, SIGTRAP, SIGFPE, SIGBUS, SIGSEGV, SIGSYS, SIGPIPE, SIGPROF] { sigdelset(&signals, signal) }
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        body()
    }
    if let name { thread.name = name }
    if let stackSize { thread.stackSize = stackSize }
    thread.start()
}
