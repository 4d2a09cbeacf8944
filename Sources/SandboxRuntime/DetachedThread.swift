import CSupervisorSupport
import Glibc

/// Starts the supervisor's long-lived POSIX threads (the spawner and the event monitor).
///
/// Plain pthreads, not Foundation's Thread: linking swift-corelibs-foundation costs every
/// one-shot `extsandbox exec` about a millisecond of start-up.
enum DetachedThread {
    /// Runs `body` on a new detached thread called `name` (at most 15 bytes, or Linux ignores it).
    /// The default stack is glibc's (8 MiB), as Foundation's Thread had. The monitor thread
    /// handles frames of up to 1 MiB: on a 1 MiB stack the host API's 1 MiB throughput halved
    /// (`scripts/bench`, 0.49 against 0.96 of the raw socketpair).
    static func start(name: String, stackSize: Int = 8 << 20, _ body: @escaping @Sendable () -> Void) throws(SandboxError) {
        final class Start: @unchecked Sendable {
            let name: String
            let body: @Sendable () -> Void
            init(name: String, body: @escaping @Sendable () -> Void) {
                self.name = name
                self.body = body
            }
        }
        let context = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setstacksize(&attributes, stackSize)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let rc = pthread_create(&thread, &attributes, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            _ = xsb_set_thread_name(start.name)
            start.body()
            return nil
        }, context)
        if rc != 0 {
            Unmanaged<Start>.fromOpaque(context).release()
            throw SandboxError(step: .control, errorNumber: rc, detail: "pthread_create (\(name))")
        }
    }
}
