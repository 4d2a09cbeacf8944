import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem
import Synchronization

/// Launches programs into sandboxes and supervises them.
///
/// One supervisor serves any number of sandboxes with two threads: a spawner thread that
/// clones (so the parent-death signal is tied to the process, not to a passing thread) and a
/// monitor thread that watches every sandbox's control socket (each sandbox's init reads its
/// seccomp notifications itself and reports violations there). The monitor thread also takes
/// each building sandbox's report that its program has exec'd (``LaunchSetupWait``), so no
/// thread waits per launch and sandboxes are built in parallel.
/// When the supervisor's process dies, even by SIGKILL, every sandbox it started dies too.
public final class Supervisor: Sendable {
    /// The process-wide supervisor.
    public static let shared: Supervisor = {
        do { return try Supervisor() } catch { fatalError("extsandbox: cannot start the supervisor: \(error)") }
    }()

    let spawner: SpawnerThread
    /// The supervisor's event thread; the host API registers its connections here too.
    public let monitor: EventMonitor
    private let cgroups: CgroupSupport?
    private let capLastCap: Int32
    /// The sandbox init (`xsb-init`), found and opened at the first launch; a failure to find it
    /// is reported by that launch and retried by the next.
    private let sandboxInit = Mutex<InitExecutable?>(nil)
    /// How long a launch may take from clone to exec before it is abandoned.
    public let setupTimeoutMilliseconds: Int32 = 10_000
    /// Pre-built sandboxes, ready for warm launches (empty unless ``prepare(_:count:)`` asks).
    let pool = SandboxPool()

    /// A supervisor with its own threads, using the cgroups it may nest under.
    ///
    /// Throws the step that failed, the call as its detail and its `errno`: the spawner thread's
    /// socket pair, thread or private descriptor table (`socketpair`, `pthread_create`,
    /// `unshare(CLONE_FILES)`), or the event monitor's `epoll_create1` or thread (step `control`,
    /// as the runtime reports the monitor's other failures).
    public convenience init() throws(SandboxError) {
        try self.init(cgroups: CgroupSupport.detect())
    }

    init(cgroups: CgroupSupport?) throws(SandboxError) {
        FileDescriptorLimit.raise()
        spawner = try SpawnerThread()
        do throws(EventMonitor.Failure) {
            monitor = try EventMonitor()
        } catch {
            throw SandboxError(error)
        }
        self.cgroups = cgroups
        let text = SystemFiles.text("/proc/sys/kernel/cap_last_cap") ?? "40"
        capLastCap = Int32(text.filter(\.isNumber)) ?? 40
    }

    /// Whether sandbox-wide memory and process limits are enforced by cgroups here (otherwise
    /// only per-process rlimits and the per-sandbox process rlimit apply).
    public var hasCgroupLimits: Bool { cgroups != nil }

    /// Runs a program in a new sandbox. Returns once the program has been exec'd inside.
    ///
    /// When ``prepare(_:count:)`` keeps pre-built sandboxes of this launch's shape, one of them
    /// runs the program (a warm launch); otherwise, or when none is ready, the sandbox is built
    /// now (a cold launch). Either way the program runs in a sandbox of its own that nothing ran
    /// in before.
    ///
    /// Fails, and leaves nothing behind, if any isolation step cannot be set up.
    public func launch(_ configuration: SandboxConfiguration) async throws(SandboxError) -> SandboxedProcess {
        let shape = try self.shape(of: configuration)
        let stdio = try Self.checkedStandardStreams(configuration)
        if !configuration.controllingTerminal && pool.keepsAny {
            if let ready = pool.take(shape.key) {
                // A pre-built sandbox that fails (stopped or damaged from outside while it waited)
                // fails only itself: the launch is then built cold, which reports its own errors.
                if let process = try? await launch(configuration, stdio: stdio, executable: shape.executable, in: ready) { return process }
            } else {
                refill()  // a kept shape whose sandboxes are all taken (or whose refill failed)
            }
        }
        let (result, cgroup, watched) = try await build(LaunchPlan(shape: shape, configuration: configuration, stdio: stdio))
        return try running(result, cgroup: cgroup, limits: configuration.policy.limits, watched: watched)
    }

    /// The shape of `configuration`'s sandbox (``LaunchPlan/Shape``), with this supervisor's
    /// filter and init.
    func shape(of configuration: SandboxConfiguration) throws(SandboxError) -> LaunchPlan.Shape {
        let filter = if let given = configuration.compiledFilter { given } else { try compiledFilter(for: configuration.policy) }
        return try LaunchPlan.Shape(configuration, filter: filter, initExecutable: try initExecutable())
    }

    /// The payload's fds 0, 1, 2 as host fds (-1: /dev/null), each open here, and at most 32 extra fds.
    static func checkedStandardStreams(_ configuration: SandboxConfiguration) throws(SandboxError) -> (Int32, Int32, Int32) {
        guard configuration.extraFileDescriptors.count <= 32 else {
            throw SandboxError(step: .configuration, errorNumber: EMFILE, detail: "at most 32 extra file descriptors")
        }
        let streams = [configuration.standardInput, configuration.standardOutput, configuration.standardError]
        for descriptor in streams.compactMap(\.descriptor) + configuration.extraFileDescriptors {
            // A number no longer open here would land, in the child, on whatever holds it there.
            guard descriptor.isOpen, fcntl(descriptor.rawValue, F_GETFD) >= 0 else {
                throw SandboxError(step: .configuration, errorNumber: EBADF,
                                   detail: "file descriptor \(descriptor.rawValue) for the sandbox is not open")
            }
        }
        let stdio = (Self.fd(configuration.standardInput, 0), Self.fd(configuration.standardOutput, 1), Self.fd(configuration.standardError, 2))
        return stdio
    }

    /// Builds the sandbox `plan` describes: cold (it runs the configuration's program) or
    /// pre-built (it stops once its shape is built, and waits for ``SandboxPool``'s take).
    /// Returns the init's report, the sandbox's cgroup and, for a cold launch, its process as
    /// the monitor thread made it at `READY`; on failure nothing is left.
    func build(_ plan: LaunchPlan) async throws(SandboxError) -> (xsb_spawn_result, SandboxCgroup?, ReadyWatch?) {
        let identity = plan.shape.identity
        let cgroup = try SandboxCgroup.make(for: plan.configuration.policy.limits, hostUID: identity.uid, under: cgroups)
        do throws(SandboxError) {
            let detached = try DetachedBindSources(plan: plan.shape.plan, identity: identity)
            let description = try plan.description(
                cgroup: cgroup, detached: detached, capLastCap: capLastCap, setupTimeoutMilliseconds: setupTimeoutMilliseconds)
            let started = await spawner.start(description, remapsRoot: identity.remapsRoot, background: plan.isPrebuilt)
            Self.cloned(plan, cgroup: cgroup, detached: detached)
            // The spawner thread only clones: the build is waited for on the monitor thread.
            let watched = plan.isPrebuilt ? nil : ReadyWatch(monitor: monitor, cgroup: cgroup)
            let result = started.failed_step == Int32(XSB_STEP_NONE.rawValue)
                ? await LaunchSetupWait.wait(for: started, on: monitor, timeoutMilliseconds: setupTimeoutMilliseconds, whenReady: watched?.ready)
                : started
            return (try Self.succeeded(result), cgroup, watched)
        } catch {
            cgroup?.remove()
            throw error
        }
    }

    /// ``launch(_:)`` for a caller that blocks its thread until the program has been exec'd
    /// (a one-shot command such as `extsandbox exec`): always cold (a pool's pre-built
    /// sandboxes are for hosts, which launch asynchronously). The calling thread waits for the
    /// spawner thread and then for the init's report itself, so no other thread takes part:
    /// neither Swift concurrency's nor Dispatch's threads, nor the monitor thread, start or
    /// wake for the launch. Never call it on a thread of the concurrency pool (from a task
    /// there): it would block that thread for the whole build.
    package func launchBlocking(_ configuration: SandboxConfiguration) throws(SandboxError) -> SandboxedProcess {
        let plan = try LaunchPlan(shape: shape(of: configuration), configuration: configuration, stdio: Self.checkedStandardStreams(configuration))
        let identity = plan.shape.identity
        let cgroup = try SandboxCgroup.make(for: configuration.policy.limits, hostUID: identity.uid, under: cgroups)
        let result: xsb_spawn_result
        do throws(SandboxError) {
            let detached = try DetachedBindSources(plan: plan.shape.plan, identity: identity)
            let description = try plan.description(
                cgroup: cgroup, detached: detached, capLastCap: capLastCap, setupTimeoutMilliseconds: setupTimeoutMilliseconds)
            let started = spawner.startBlocking(description, remapsRoot: identity.remapsRoot)
            Self.cloned(plan, cgroup: cgroup, detached: detached)
            result = try Self.succeeded(started.failed_step == Int32(XSB_STEP_NONE.rawValue)
                ? LaunchSetupWait.waitBlocking(for: started, timeoutMilliseconds: setupTimeoutMilliseconds)
                : started)
        } catch {
            cgroup?.remove()
            throw error
        }
        return try running(result, cgroup: cgroup, limits: configuration.policy.limits)
    }

    /// After the spawner thread's clone (done or failed): it has its own copies of the fds
    /// now, so the cgroup's, the program's copy and the detached mounts, open until then, go.
    private static func cloned(_ plan: LaunchPlan, cgroup: SandboxCgroup?, detached: DetachedBindSources) {
        cgroup?.closeDescriptors()
        withExtendedLifetime(plan.configuration.executableCopy) {}
        withExtendedLifetime(detached.trees) {}
    }

    /// `result`, or its failure as an error.
    static func succeeded(_ result: xsb_spawn_result) throws(SandboxError) -> xsb_spawn_result {
        guard result.failed_step == Int32(XSB_STEP_NONE.rawValue) else {
            let detail = withUnsafeBytes(of: result.detail) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            throw SandboxError(step: SandboxError.Step(launchCode: result.failed_step), errorNumber: result.error_number, detail: detail)
        }
        return result
    }

    /// A sandbox's process made and watched on the monitor thread as its `READY` arrives, so
    /// that what the init reports right behind it (a program that ends at once, or whose
    /// `READY` waited behind it for a CPU) is taken then, not once the caller has run; or why
    /// it could not be watched, for the caller to undo (``running(_:cgroup:limits:watched:)``).
    final class ReadyWatch: Sendable {
        private let made = Mutex<(process: SandboxedProcess, failure: SandboxError?)?>(nil)
        private let monitor: EventMonitor
        private let cgroup: SandboxCgroup?

        init(monitor: EventMonitor, cgroup: SandboxCgroup?) {
            self.monitor = monitor
            self.cgroup = cgroup
        }

        /// ``LaunchSetupWait``'s `whenReady`, on the monitor thread.
        func ready(_ result: xsb_spawn_result) {
            let watched = Self.watch(result, monitor: monitor, cgroup: cgroup)
            made.withLock { $0 = watched }
        }

        /// The started sandbox's process, watched from now on; or why it could not be watched
        /// (the caller undoes it: ``SandboxedProcess/abandon()`` blocks, never on the monitor thread).
        static func watch(_ result: xsb_spawn_result, monitor: EventMonitor, cgroup: SandboxCgroup?)
            -> (process: SandboxedProcess, failure: SandboxError?) {
            let process = SandboxedProcess(result: result, monitor: monitor, cgroup: cgroup)
            do {
                try process.startMonitoring()
                return (process, nil)
            } catch {
                return (process, error)
            }
        }

        /// What ``ready(_:)`` made, once.
        func take() -> (process: SandboxedProcess, failure: SandboxError?)? {
            made.withLock { made in
                defer { made = nil }
                return made
            }
        }
    }

    /// A started sandbox, watched from now on (its wall-clock limit counts from here): the
    /// process `watched` made as its `READY` arrived, or one made here.
    func running(_ result: xsb_spawn_result, cgroup: SandboxCgroup?, limits: ResourceLimits, watched: ReadyWatch? = nil) throws(SandboxError) -> SandboxedProcess {
        let (process, failure) = watched?.take() ?? ReadyWatch.watch(result, monitor: monitor, cgroup: cgroup)
        if let failure {
            process.abandon()
            throw failure
        }
        if let seconds = limits.wallClockSeconds {
            Task.detached { [process] in
                try? await Task.sleep(for: .seconds(Double(seconds)))
                process.killForWallClock()
            }
        }
        return process
    }

    /// The sandbox init, opened once (``InitExecutable``).
    private func initExecutable() throws(SandboxError) -> InitExecutable {
        if let found = sandboxInit.withLock({ $0 }) { return found }
        let found = try InitExecutable.locate()
        return sandboxInit.withLock { current in
            // Another launch found it meanwhile: `found` closes its own descriptor when it goes
            // (closing its number here too would close whatever the number belongs to by then).
            if let current { return current }
            current = found
            return found
        }
    }

    private static func fd(_ stream: SandboxConfiguration.StandardStream, _ number: Int32) -> Int32 {
        switch stream {
        case .inherit: return number
        case .null: return -1
        case .fileDescriptor(let fd): return fd.rawValue
        }
    }

    /// The process's policy store compiles each distinct seccomp policy once; later launches reuse the BPF.
    private func compiledFilter(for policy: Policy) throws(SandboxError) -> CompiledSeccompFilter {
        do {
            return try PolicyStore.shared.filter(for: policy)
        } catch {
            throw SandboxError(policy: policy.name, error)
        }
    }
}
