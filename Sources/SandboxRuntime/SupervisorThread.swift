import SandboxSystem

/// ``DetachedThread`` for the supervisor, whose failures are launch steps.
enum SupervisorThread {
    static func start(name: String, stackSize: Int = 8 << 20, _ body: @escaping @Sendable () -> Void) throws(SandboxError) {
        do {
            try DetachedThread.start(name: name, stackSize: stackSize, body)
        } catch {
            throw SandboxError(step: .control, errorNumber: error.code, detail: "pthread_create (\(name))")
        }
    }
}
