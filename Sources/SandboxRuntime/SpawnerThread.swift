import CSandboxShim
import Glibc
import Synchronization

/// The one long-lived thread that clones every sandbox.
///
/// PR_SET_PDEATHSIG fires when the parent *thread* exits, not the process; Swift's
/// concurrency and Dispatch threads come and go, so a sandbox cloned from one of them could be
/// killed at a random moment. Cloning from a thread that never exits ties each sandbox's
/// lifetime to the supervisor process instead.
///
/// The thread has an fd table of its own, holding only its inbox (CSandboxShim's
/// spawner_table.c): a clone copies the cloning thread's table, and the host's holds a few fds
/// per running sandbox. Each launch hands the thread the fds it passes on and gets the
/// sandbox's control socket and pidfd back, so a launch costs the same with 10 or 10,000
/// sandboxes running, and no host fd is ever in a sandbox's clone, not even until it closes
/// them. A launch is one C call there, `xsb_spawner_launch` (``start(_:remapsRoot:background:)``),
/// and nothing else may run on this thread: an fd it opened would not be the host's, and a
/// thread it created would share its table (a thread shares the table of the thread that
/// creates it). So it never touches Swift concurrency or Dispatch either: resuming a task there
/// could make libdispatch start a worker from it. A second thread, made from the host's table,
/// resumes each finished launch (``relay()``); it starts with the first asynchronous launch (a
/// blocking launch, ``startBlocking(_:remapsRoot:)``, is woken without it).
/// `@unchecked`: the semaphores are thread-safe by design and live as long as the threads.
final class SpawnerThread: @unchecked Sendable {
    private let jobs = Mutex<[Job]>([])
    /// Counts queued jobs; the thread sleeps on it (a semaphore needs a stable address).
    private let pending: UnsafeMutablePointer<sem_t>
    /// The host's end of the thread's inbox, locked so that hand-overs reach the inbox in the
    /// order of their jobs.
    private let outbox: Mutex<Int32>
    /// The thread's end, in its own table only.
    private let inbox: Int32
    /// Finished launches, for the relay thread to resume, and their count.
    private let finished = Mutex<[@Sendable () -> Void]>([])
    private let finishedCount: UnsafeMutablePointer<sem_t>
    /// Whether the relay thread has been started.
    private let relayStarted = Mutex(false)
    /// Launches queued or running that a caller waits for (not a pool's refills).
    private let foregroundJobs = Atomic<Int>(0)

    init() throws(SandboxError) {
        var ends: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw SandboxError(step: .socketPair, errorNumber: errno, detail: "the spawner thread's inbox")
        }
        outbox = Mutex(ends[0])
        inbox = ends[1]
        pending = .allocate(capacity: 1)
        sem_init(pending, 0, 0)
        finishedCount = .allocate(capacity: 1)
        sem_init(finishedCount, 0, 0)
        let made = BlockingValue<Int32>()
        do {
            // No asynchronous signal's handler ever runs here: a handler writes to fds by their numbers in the
            // host's table (a wake-up pipe), which in this thread's table are other files.
            try SupervisorThread.start(name: "xsb-spawner", stackSize: 1 << 20, blockingAsyncSignals: true) { [self] in
                let rc = xsb_spawner_table_make_private(inbox)
                made.set(rc)
                if rc == 0 { loop() }
            }
        } catch {
            close(ends[0])
            close(ends[1])
            throw error
        }
        let rc = made.wait()
        close(ends[1])  // the thread's copy is in its own table now (or it failed)
        guard rc == 0 else {
            close(ends[0])
            // The thread ended; its semaphore and jobs are never used.
            throw SandboxError(step: .fileDescriptors, errorNumber: -rc, detail: "unshare(CLONE_FILES) for the spawner thread")
        }
    }

    /// Starts one sandbox from `description`: hands its fds to the spawner thread, which clones
    /// the sandbox there (`xsb_spawner_launch`: the fds placed, a root caller's supplementary
    /// groups dropped when `remapsRoot`, `xsb_spawn_start`), and brings back the started
    /// sandbox's control socket and pidfd. Returns with `failed_step` set (and nothing of the
    /// sandbox left) otherwise. The description and its arena are handed over whole
    /// (`sending`). The sandbox is still being built: the caller waits for its init's report
    /// (``LaunchSetupWait``).
    /// `background`: a pool's refill, which no caller waits for (see ``isLaunching``).
    func start(_ description: sending LaunchDescription, remapsRoot: Bool, background: Bool = false) async -> xsb_spawn_result {
        do {
            try startRelay()
        } catch {
            return Self.failure(error.step, error.errorNumber, error.detail)
        }
        let result = OnceContinuation<xsb_spawn_result>()
        let handOver = handOver(description, remapsRoot: remapsRoot, background: background) { [self] out in
            // Resuming a task here could make libdispatch start a worker from this thread.
            finish { result.resume(out) }
        }
        guard case .handedOver(let reply) = handOver else { return handOver.failure }
        return receive(await result.value, reply: reply)
    }

    /// ``start(_:remapsRoot:background:)`` for a caller that blocks its thread until the clone
    /// is done (a one-shot command): the spawner thread wakes it directly, without the relay
    /// thread's hop, since waking a blocked thread touches neither Swift concurrency nor
    /// Dispatch.
    func startBlocking(_ description: sending LaunchDescription, remapsRoot: Bool) -> xsb_spawn_result {
        let done = BlockingValue<xsb_spawn_result>()
        let handOver = handOver(description, remapsRoot: remapsRoot, background: false) { out in done.set(out) }
        guard case .handedOver(let reply) = handOver else { return handOver.failure }
        return receive(done.wait(), reply: reply)
    }

    /// A launch handed to the spawner thread (the reply socket's end to read and the fd kept
    /// for what comes back), or the failure that kept it from being handed over.
    private enum HandOver {
        case handedOver(reply: (read: Int32, write: Int32, placeholder: Int32))
        case failed(xsb_spawn_result)

        var failure: xsb_spawn_result {
            guard case .failed(let result) = self else { preconditionFailure("the launch was handed over") }
            return result
        }
    }

    /// Queues the launch for the spawner thread, which calls `completed` with its result there
    /// (so `completed` must not block nor touch Swift concurrency or Dispatch).
    private func handOver(_ description: sending LaunchDescription, remapsRoot: Bool, background: Bool,
                          completed: @escaping @Sendable (xsb_spawn_result) -> Void) -> HandOver {
        let fds = description.handedFileDescriptors
        var reply: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &reply) == 0 else {
            return .failed(Self.failure(.socketPair, errno, "the launch's reply socket pair"))
        }
        // Room for the two fds that come back (the reply pair's second end and this one are
        // closed right before they do), taken now: a host at its fd limit fails here, before
        // anything of the sandbox exists.
        let placeholder = fcntl(reply[0], F_DUPFD_CLOEXEC, 0)
        guard placeholder >= 0 else {
            let error = errno
            close(reply[0])
            close(reply[1])
            return .failed(Self.failure(.socketPair, error, "the launch's reply socket pair"))
        }
        let inbox = inbox, expected = Int32(fds.count), clearGroups: Int32 = remapsRoot ? 1 : 0
        let job = Job {
            var out = xsb_spawn_result()
            description.withConfiguration { config in _ = xsb_spawner_launch(inbox, expected, &config, clearGroups, &out) }
            if !background { self.foregroundJobs.subtract(1, ordering: .relaxed) }
            completed(out)
        }
        let handedOver = outbox.withLock { outbox -> Int32 in
            let rc = fds.withUnsafeBufferPointer { xsb_spawner_hand_over(outbox, $0.baseAddress, expected, reply[1]) }
            if rc == 0 {
                if !background { foregroundJobs.add(1, ordering: .relaxed) }
                jobs.withLock { $0.append(job) }
                sem_post(pending)
            }
            return rc
        }
        guard handedOver == 0 else {
            close(reply[0])
            close(reply[1])
            close(placeholder)
            return .failed(Self.failure(.fileDescriptors, -handedOver, "handing the launch's fds to the spawner thread"))
        }
        return .handedOver(reply: (reply[0], reply[1], placeholder))
    }

    /// The spawner thread's result `out` completed with the control socket and pidfd it sent
    /// back on `reply` (whose fds this closes).
    private func receive(_ result: xsb_spawn_result, reply: (read: Int32, write: Int32, placeholder: Int32)) -> xsb_spawn_result {
        var out = result
        defer { close(reply.read) }
        close(reply.write)
        close(reply.placeholder)
        guard out.failed_step == Int32(XSB_STEP_NONE.rawValue) else { return out }
        let received = xsb_spawner_receive_result(reply.read, &out)
        if received != 0 {
            // The sandbox runs, but its fds did not arrive (another thread took the room kept
            // for them at the fd limit). Its control socket is closed everywhere now, so its init
            // ends the sandbox; it is this process's unreaped child, so its pid is still its own
            // (unless the kernel reaps children here: then it ends and goes by itself).
            if !InitProcess.kernelReapsChildren {
                SandboxSignals.kill(unreapedChild: out.pid)
                InitProcess.reapBlocking(out.pid)
            }
            return Self.failure(.fileDescriptors, -received, "receiving the sandbox's control socket and pidfd")
        }
        return out
    }

    /// Whether a launch a caller waits for is queued or running: a pool's refill waits until
    /// none is, so that it never delays one by more than the one clone already under way.
    var isLaunching: Bool { foregroundJobs.load(ordering: .relaxed) > 0 }

    /// Hands a finished launch's resumption to the relay thread (called on the spawner thread).
    private func finish(_ resume: @escaping @Sendable () -> Void) {
        finished.withLock { $0.append(resume) }
        sem_post(finishedCount)
    }

    /// Starts the relay thread unless it runs: from the host's table, as every thread but the
    /// spawner's.
    private func startRelay() throws(SandboxError) {
        try relayStarted.withLock { (started: inout Bool) throws(SandboxError) in
            guard !started else { return }
            try SupervisorThread.start(name: "xsb-spawn-done", stackSize: 256 << 10) { [self] in relay() }
            started = true
        }
    }

    private func relay() -> Never {
        while true {
            while sem_wait(finishedCount) != 0 {}  // EINTR
            let resume = finished.withLock { $0.removeFirst() }
            resume()
        }
    }

    private static func failure(_ step: SandboxError.Step, _ errorNumber: Int32, _ detail: String) -> xsb_spawn_result {
        var out = xsb_spawn_result()
        out.pidfd = -1
        out.control_fd = -1
        out.failed_step = step.launchCode ?? Int32(XSB_STEP_FILE_DESCRIPTORS.rawValue)
        out.error_number = errorNumber
        withUnsafeMutableBytes(of: &out.detail) { buffer in
            let bytes = Array(detail.utf8.prefix(buffer.count - 1))
            buffer.copyBytes(from: bytes)
            buffer[bytes.count] = 0
        }
        return out
    }

    /// One job, handed to the spawner thread whole (`sending`): its closure and what that
    /// captures need not be Sendable. The lock is the job's own, taken once, by that thread.
    private final class Job: Sendable {
        private let work: Mutex<(() -> Void)?>

        init(_ work: sending @escaping () -> Void) {
            self.work = Mutex(work)
        }

        func run() {
            work.withLock { work in
                work?()
                work = nil
            }
        }
    }

    private func loop() -> Never {
        while true {
            while sem_wait(pending) != 0 {}  // EINTR
            let job = jobs.withLock { $0.removeFirst() }
            job.run()
        }
    }
}
