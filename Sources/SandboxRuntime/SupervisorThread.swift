import SandboxSystem

/// ``DetachedThread`` for the supervisor, whose failures are launch steps. The thread names
/// itself with one `prctl` (a thread starts per sandbox's end, so this stays cheap).
enum SupervisorThread {
    static func start(name: String, stackSize: Int = 8 << 20, blockingAsyncSignals: Bool = false,
                      _ body: @escaping @Sendable () -> Void) throws(SandboxError) {
        do {
            try DetachedThread.start(name: name, stackSize: stackSize, blockingAsyncSignals: blockingAsyncSignals, body)
        } catch {
            throw SandboxError(step: .control, errorNumber: error.code, detail: "pthread_create (\(name))")
        }
    }
}
