import CSandboxSystem
import Glibc

/// Starts the long-lived POSIX threads of the supervisor, the host API and the SDK (the spawner,
/// the event monitor, descriptor closers, an extension's connection readers).
///
/// Plain pthreads, not Foundation's Thread: linking swift-corelibs-foundation costs every
/// one-shot `extsandbox exec` start-up time, and an extension stays small without it.
package enum DetachedThread {
    /// Runs `body` on a new detached thread called `name` (at most 15 bytes, or Linux ignores
    /// it; `nil`: the caller's `body` names it, or it keeps the inherited name). The default stack is glibc's (8 MiB); the event monitor handles frames of up to
    /// 1 MiB, and a smaller stack measurably slowed the host API's large messages. With
    /// `blockingAsyncSignals` the thread blocks the asynchronous signals (as the concurrency
    /// pool's threads do), so that the process's signals go to the threads that expect them.
    /// Throws the `pthread_create` error.
    package static func start(name: String?, stackSize: Int = 8 << 20, blockingAsyncSignals: Bool = false,
                              _ body: @escaping @Sendable () -> Void) throws(Errno) {
        final class Start: @unchecked Sendable {
            let name: String?
            let blockingAsyncSignals: Bool
            let body: @Sendable () -> Void
            init(name: String?, blockingAsyncSignals: Bool, body: @escaping @Sendable () -> Void) {
                self.name = name
                self.blockingAsyncSignals = blockingAsyncSignals
                self.body = body
            }
        }
        let context = Unmanaged.passRetained(Start(name: name, blockingAsyncSignals: blockingAsyncSignals, body: body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setstacksize(&attributes, stackSize)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let rc = pthread_create(&thread, &attributes, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            if start.blockingAsyncSignals {
                var signals = sigset_t()
                sigfillset(&signals)
                for signal in [SIGILL, SIGTRAP, SIGFPE, SIGBUS, SIGSEGV, SIGSYS, SIGPIPE] { sigdelset(&signals, signal) }
                pthread_sigmask(SIG_BLOCK, &signals, nil)
            }
            if let name = start.name { DetachedThread.nameThisThread(name) }
            start.body()
            return nil
        }, context)
        if rc != 0 {
            Unmanaged<Start>.fromOpaque(context).release()
            throw Errno(rc)
        }
    }

    /// What `ps` and `top` show for the calling thread (its first 15 bytes); a failure leaves
    /// the inherited name. With prctl, not by writing /proc/thread-self/comm: that lookup leaves
    /// dentries under /proc/PID/task/TID, and when the process exits, whoever reaps it waits in
    /// the kernel while the exiting thread's own flush of those dentries runs (the parent of
    /// every one-shot `extsandbox exec`; docs/performance.md).
    static func nameThisThread(_ name: String) {
        _ = xsb_name_this_thread(name)
    }

    /// The calling thread's name (for tests).
    static func nameOfThisThread() -> String {
        var buffer = [CChar](repeating: 0, count: 16)
        _ = xsb_this_thread_name(&buffer)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
