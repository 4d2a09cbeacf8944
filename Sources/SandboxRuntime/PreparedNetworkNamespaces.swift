import CSandboxShim
import Glibc
import SandboxSystem
import Synchronization

/// Network namespaces made ahead of the cold launches that take them, on a thread of their own.
///
/// Creating a network namespace is the dearest part of a sandbox's clone (the kernel runs every
/// network subsystem's per-namespace set-up), and it depends on nothing per launch: every
/// sandbox gets a new namespace with only its loopback device, up. So a supervisor that may
/// (root) makes them here, off every caller's path, and a cold launch takes one: the spawner
/// thread enters it for the clone, which the init inherits (`prepared_network.c`). Each is used
/// by one sandbox, once: closed as soon as the spawner thread has its copy. When none is ready,
/// the clone makes a new one as always: a launch never waits for this thread. A refill that
/// fails for want of fds or memory is asked again by the next take.
///
/// Such a namespace is owned by the supervisor's user namespace, not the sandbox's, so nothing
/// in the sandbox has any capability over it (it cannot take loopback down or change its
/// sysctls, which it could in a namespace of its own). An unprivileged supervisor keeps the
/// clone's own namespace: its spawner thread could not enter one from the sandbox's side.
///
/// The thread makes its first namespace at normal priority (a launch may follow right away, and
/// a one-shot command makes only that one) and every later one at the lowest, so that refills
/// never take the CPU from the launches. Everything still ready is closed, and the thread
/// ended, by ``close()`` (the supervisor's end).
/// `@unchecked`: the semaphores are thread-safe and live as long as this object.
final class PreparedNetworkNamespaces: @unchecked Sendable {
    private struct State {
        /// Made and not taken: their fds, in the host's table (close-on-exec).
        var ready: [Int32] = []
        /// How many are still to be made, the one under way included.
        var wanted = 0
        /// How many to keep ready: each take below it asks for one more.
        var level = 0
        var threadStarted = false
        /// Closed, or this supervisor cannot make them: nothing more is made.
        var ended = false
    }

    private let state = Mutex(State())
    /// Posted for each request and at the end; the thread sleeps on it.
    private let wake: UnsafeMutablePointer<sem_t> = .allocate(capacity: 1)
    /// Posted by the thread as it ends (``close()`` waits for it: nothing is left behind).
    private let threadEnded: UnsafeMutablePointer<sem_t> = .allocate(capacity: 1)
    /// Whether to try at all: only root may enter a namespace from the spawner thread.
    private let mayPrepare: Bool

    init(mayPrepare: Bool = geteuid() == 0) {
        self.mayPrepare = mayPrepare
        sem_init(wake, 0, 0)
        sem_init(threadEnded, 0, 0)
    }

    deinit {
        for fd in state.withLock({ $0.ready }) { Glibc.close(fd) }
        sem_destroy(wake)
        wake.deallocate()
        sem_destroy(threadEnded)
        threadEnded.deallocate()
    }

    /// Keeps `count` namespaces ready from now on, refilled after each take (a host's
    /// supervisor, from its first cold launch on).
    func keepReady(_ count: Int) {
        request { state in
            guard count > state.level else { return false }
            state.level = count
            let missing = count - state.ready.count - state.wanted
            state.wanted += max(missing, 0)
            return missing > 0
        }
    }

    /// Makes one more namespace, not refilled once taken (a one-shot command, at its start,
    /// for its one launch).
    func prepareOne() {
        request { state in
            state.wanted += 1
            return true
        }
    }

    /// A ready namespace, now the caller's (to hand to the spawner thread once, and close), or
    /// nil when none is ready. Asks for one more if namespaces are kept ready.
    func take() -> FileDescriptor? {
        var taken: Int32?
        request { state in
            taken = state.ready.popLast()
            // Below the level (this one taken, or none left after a failed refill): one more.
            guard state.ready.count + state.wanted < state.level else { return false }
            state.wanted += 1
            return true
        }
        return taken.flatMap { FileDescriptor(adopting: $0) }
    }

    /// How many are ready now (for tests).
    var readyCount: Int { state.withLock { $0.ready.count } }
    /// Whether the thread is making none now, so holds no fd of its own for a moment (for tests
    /// that count the process's fds).
    var isIdle: Bool { state.withLock { $0.wanted == 0 || $0.ended } }
    /// The fds of those ready now, still this object's (for tests).
    var readyDescriptors: [Int32] { state.withLock { $0.ready } }

    /// Adds `fd`, now this object's, as if it were a namespace made here (for tests: what a
    /// launch does with one it cannot use).
    func insertReady(_ fd: Int32) {
        state.withLock { $0.ready.append(fd) }
    }

    /// Closes every ready namespace, makes no more, and waits for the thread to end (it may be
    /// finishing one: it closes that one itself).
    func close() {
        let (ready, threadRuns) = state.withLock { state -> ([Int32], Bool) in
            let ready = state.ready
            let threadRuns = state.threadStarted && !state.ended
            state.ready = []
            state.ended = true
            return (ready, threadRuns)
        }
        for fd in ready { Glibc.close(fd) }
        guard threadRuns else { return }
        sem_post(wake)
        while sem_wait(threadEnded) != 0 {}  // EINTR
    }

    /// Changes the state with `change` (true: there is more to make) and wakes the thread,
    /// starting it first if needed.
    private func request(_ change: (inout State) -> Bool) {
        let (more, start) = state.withLock { state -> (Bool, Bool) in
            // A take still takes what is ready when no more are made.
            guard change(&state), !state.ended, mayPrepare else { return (false, false) }
            let start = !state.threadStarted
            state.threadStarted = true
            return (true, start)
        }
        guard more else { return }
        if start {
            do {
                try SupervisorThread.start(name: "xsb-netns", stackSize: 128 << 10, blockingAsyncSignals: true) { [self] in run() }
            } catch {
                // Launches go on with the clone's own namespaces.
                state.withLock { $0.ended = true }
                return
            }
        }
        sem_post(wake)
    }

    private func run() {
        defer { sem_post(threadEnded) }
        let home = xsb_network_namespace_open_own()
        guard home >= 0 else { return stop() }
        defer { Glibc.close(home) }
        var count = 0
        while true {
            while sem_wait(wake) != 0 {}  // EINTR
            while true {
                let more = state.withLock { state -> Bool? in state.ended ? nil : state.wanted > 0 }
                guard let more else { return }
                guard more else { break }
                if count == 1 {
                    // Refills must not compete with the launches. Lowered only now: a thread that
                    // sleeps at the lowest priority delays the end of a one-shot command on a busy
                    // machine, whose process is reaped only once this thread has taken its SIGKILL.
                    _ = xsb_network_namespace_thread_in_background()
                }
                count += 1
                var stranded: Int32 = 0
                let made = xsb_network_namespace_prepare(home, &stranded)
                if made < 0 {
                    // Stranded in the namespace it made, or not allowed: no more, ever. Anything
                    // else (the fd limit, memory) drops what is asked until the next take asks again.
                    if stranded != 0 || made == -EPERM { return stop() }
                    state.withLock { $0.wanted = 0 }
                    break
                }
                let kept = state.withLock { state -> Bool in
                    guard !state.ended else { return false }
                    state.wanted -= 1
                    state.ready.append(made)
                    return true
                }
                guard kept else {
                    Glibc.close(made)
                    return
                }
            }
        }
    }

    /// Makes no more (what is ready stays ready).
    private func stop() {
        state.withLock { $0.ended = true }
    }
}
