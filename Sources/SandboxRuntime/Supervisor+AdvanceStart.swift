import SandboxSystem
import Synchronization

extension Supervisor {
    /// Starts ``shared``, finds the sandbox init and makes the runtime types the end of a sandbox
    /// needs, on a short-lived thread of its own (`xsb-start`), so that a one-shot caller that
    /// launches once (`extsandbox exec`) has that first-time work done on the other CPU while it
    /// prepares its launch (arguments, policy, mounts) on its own thread.
    ///
    /// Its launch then waits for what is not done yet rather than do it a second time alongside.
    /// Nothing changes but when the work is done: a supervisor that cannot start still stops the
    /// process at its first use of ``shared`` (not here), and an init that cannot be found is
    /// still reported by the launch, which looks again. The thread inherits the caller's signal
    /// mask, as the supervisor's threads it starts do, so call it where those threads could be
    /// started. When the thread cannot be created, the launch does the work.
    package static func startSharedInAdvance() {
        startedInAdvance.store(true, ordering: .releasing)
        try? DetachedThread.start(name: "xsb-start") { _ = advanceStart }
    }

    /// Waits for the work of ``startSharedInAdvance()`` when it was asked for (doing it, if its
    /// thread has not begun), so that a launch does not repeat it alongside; else returns at once.
    static func joinAdvanceStart() {
        if startedInAdvance.load(ordering: .acquiring) { _ = advanceStart }
    }

    /// Whether the sandbox init has been found and opened (by a launch or by
    /// ``startSharedInAdvance()``).
    var hasFoundInit: Bool { sandboxInit.withLock { $0 != nil } }

    private static let startedInAdvance = Atomic<Bool>(false)

    /// The work of ``startSharedInAdvance()``, done once by whichever thread comes first (the
    /// others wait for it).
    private static let advanceStart: Void = {
        guard case .started(let supervisor) = sharedStart else { return }
        _ = try? supervisor.initExecutable()
        _ = SandboxedProcess.ackWaiterTypes
    }()
}
