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
/// them. Nothing else may run on this thread: an fd it opened would not be the host's, and a
/// thread it created would share its table (a thread shares the table of the thread that
/// creates it). So it never touches Swift concurrency or Dispatch either: resuming a task there
/// could make libdispatch start a worker from it. A second thread, made from the host's table,
/// resumes each finished launch (``relay()``).
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
        let made = OnceValue()
        do {
            // The relay first: both start from this thread's table, the host's.
            try SupervisorThread.start(name: "xsb-spawn-done", stackSize: 256 << 10) { [self] in relay() }
            try SupervisorThread.start(name: "xsb-spawner", stackSize: 1 << 20) { [self] in
                let rc = xsb_spawner_table_make_private(inbox)
                made.set(rc)
                if rc == 0 { loop() }
            }
        } catch {
            // (A relay already started waits for good: it holds no fd.)
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

    /// Starts one sandbox: hands `fds` (``SpawnerThread/fds(of:)`` of its configuration) to
    /// the spawner thread, runs `start` there with the thread's copies (for
    /// `xsb_spawner_apply`), and brings back a started sandbox's control socket and pidfd
    /// (`start` returns with `failed_step` set otherwise). `start` and what it captures are
    /// handed over whole (`sending`).
    /// `background`: a pool's refill, which no caller waits for (see ``isLaunching``).
    func launch<Extra: Sendable>(handing fds: [Int32], background: Bool = false, _ start: sending @escaping (inout xsb_spawner_fds) -> (xsb_spawn_result, Extra)) async -> (xsb_spawn_result, Extra?) {
        var reply: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &reply) == 0 else {
            return (Self.failure(.socketPair, errno, "the launch's reply socket pair"), nil)
        }
        defer { close(reply[0]) }
        // Room for the two fds that come back (the reply pair's second end and this one are
        // closed right before they do), taken now: a host at its fd limit fails here, before
        // anything of the sandbox exists.
        let placeholder = fcntl(reply[0], F_DUPFD_CLOEXEC, 0)
        guard placeholder >= 0 else {
            let error = errno
            close(reply[1])
            return (Self.failure(.socketPair, error, "the launch's reply socket pair"), nil)
        }
        let result = OnceContinuation<(xsb_spawn_result, Extra?)>()
        let inbox = inbox, expected = Int32(fds.count)
        let job = Job {
            var storage = xsb_spawner_fds()
            var out: xsb_spawn_result
            var extra: Extra?
            let taken = xsb_spawner_take_over(inbox, expected, &storage)
            if taken != 0 {
                out = Self.failure(.fileDescriptors, -taken, "handing the launch's fds to the spawner thread")
            } else {
                (out, extra) = start(&storage)
                if out.failed_step == Int32(XSB_STEP_NONE.rawValue) {
                    let sent = xsb_spawner_send_result(storage.reply, &out)
                    if sent != 0 {
                        // Fail closed: no sandbox runs that its host cannot reach.
                        SandboxSignals.kill(pidfd: out.pidfd)
                        _ = xsb_pidfd_wait(out.pidfd)
                        out = Self.failure(.fileDescriptors, -sent, "returning the sandbox's control socket and pidfd")
                    }
                }
            }
            xsb_spawner_table_clear(inbox)
            if !background { self.foregroundJobs.subtract(1, ordering: .relaxed) }
            self.finish { [out, extra] in result.resume((out, extra)) }
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
            close(reply[1])
            close(placeholder)
            return (Self.failure(.fileDescriptors, -handedOver, "handing the launch's fds to the spawner thread"), nil)
        }
        var (out, extra) = await result.value
        close(reply[1])
        close(placeholder)
        guard out.failed_step == Int32(XSB_STEP_NONE.rawValue) else { return (out, extra) }
        let received = xsb_spawner_receive_result(reply[0], &out)
        if received != 0 {
            // The sandbox runs, but its fds did not arrive (another thread took the room kept
            // for them at the fd limit). Its control socket is closed everywhere now, so its init
            // ends the sandbox; it is this process's unreaped child, so its pid is still its own
            // (unless the kernel reaps children here: then it ends and goes by itself).
            if !InitProcess.kernelReapsChildren {
                SandboxSignals.kill(unreapedChild: out.pid)
                InitProcess.reapBlocking(out.pid)
            }
            return (Self.failure(.fileDescriptors, -received, "receiving the sandbox's control socket and pidfd"), extra)
        }
        return (out, extra)
    }

    /// Whether a launch a caller waits for is queued or running: a pool's refill waits until
    /// none is, so that it never delays one by more than the one clone already under way.
    var isLaunching: Bool { foregroundJobs.load(ordering: .relaxed) > 0 }

    /// Hands a finished launch's resumption to the relay thread (called on the spawner thread).
    private func finish(_ resume: @escaping @Sendable () -> Void) {
        finished.withLock { $0.append(resume) }
        sem_post(finishedCount)
    }

    private func relay() -> Never {
        while true {
            while sem_wait(finishedCount) != 0 {}  // EINTR
            let resume = finished.withLock { $0.removeFirst() }
            resume()
        }
    }

    /// The fds a launch with `config` hands over, in `xsb_spawner_apply`'s order.
    /// (nil: more extra fds than a launch takes.)
    static func fds(of config: xsb_spawn_config) -> [Int32]? {
        var config = config
        var listed = [Int32](repeating: -1, count: Int(XSB_SPAWNER_MAX_FDS))
        let count = listed.withUnsafeMutableBufferPointer { xsb_spawner_list_fds(&config, $0.baseAddress) }
        return count >= 0 ? Array(listed.prefix(Int(count))) : nil
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

    /// The thread's first result (its table made private, or the errno), waited for once.
    private final class OnceValue: @unchecked Sendable {
        private var value: Int32 = 0
        /// A semaphore needs a stable address.
        private let done: UnsafeMutablePointer<sem_t> = .allocate(capacity: 1)

        init() { sem_init(done, 0, 0) }
        deinit {
            sem_destroy(done)
            done.deallocate()
        }

        func set(_ value: Int32) {
            self.value = value
            sem_post(done)
        }

        func wait() -> Int32 {
            while sem_wait(done) != 0 {}  // EINTR
            return value
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
