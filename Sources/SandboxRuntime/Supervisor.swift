import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem
import Synchronization

/// Launches programs into sandboxes and supervises them.
///
/// One supervisor serves any number of sandboxes with two threads: a spawner thread that
/// clones (so the parent-death signal is tied to the process, not to a passing thread) and a
/// monitor thread that watches every sandbox's pidfd and control socket (each sandbox's init
/// reads its seccomp notifications itself and reports violations there). While a sandbox is
/// being built, a short-lived thread of its own waits for its init's report, so that launches
/// are built in parallel.
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
    /// Numbers the sandboxes' cgroups: process-wide, as their names are (several supervisors may run in one process).
    private static let launchCounter = Atomic<Int>(0)
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
        let (result, cgroup) = try await build(shape, configuration, stdio: stdio, prebuilt: false)
        return try running(result, cgroup: cgroup, limits: configuration.policy.limits)
    }

    /// What fixes a launch's sandbox before its program runs, checked on the host: the filter,
    /// the final mount plan (the program's own bind included), the host ids.
    struct Shape {
        let filter: CompiledSeccompFilter
        let plan: MountPlan
        /// The path exec'd inside (or, with a sealed copy, the one named in messages).
        let executable: String
        let identity: HostIdentity
        let initExecutable: InitExecutable
        let key: SandboxPool.Key
    }

    func shape(of configuration: SandboxConfiguration) throws(SandboxError) -> Shape {
        let filter = if let given = configuration.compiledFilter { given } else { try compiledFilter(for: configuration.policy) }
        let initExecutable = try self.initExecutable()
        var plan = try MountPlan(
            policy: configuration.policy, extraMounts: configuration.extraMounts, dataMounts: configuration.dataMounts,
            hostname: configuration.hostname, uid: configuration.sandboxUID, gid: configuration.sandboxGID)
        let executable = configuration.executableCopy == nil
            ? try Self.visibleExecutable(configuration.executable, plan: &plan) : configuration.executable
        guard executable.hasPrefix("/") else {
            throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "executable \(executable) is not an absolute path")
        }
        let identity = try HostIdentity.forCaller()
        let key = SandboxPool.Key(
            policy: configuration.policy, filter: filter, plan: plan, hostname: configuration.hostname,
            audit: configuration.auditSeccomp, sandboxUID: configuration.sandboxUID, sandboxGID: configuration.sandboxGID, identity: identity)
        return Shape(filter: filter, plan: plan, executable: executable, identity: identity, initExecutable: initExecutable, key: key)
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

    /// Builds a sandbox of `shape`: cold (`prebuilt` false: it runs `configuration`'s program)
    /// or pre-built (it stops once its shape is built, and waits for ``SandboxPool``'s take).
    /// Returns the init's report and the sandbox's cgroup; on failure nothing is left.
    func build(
        _ shape: Shape, _ configuration: SandboxConfiguration, stdio: (Int32, Int32, Int32), prebuilt: Bool
    ) async throws(SandboxError) -> (xsb_spawn_result, SandboxCgroup?) {
        let identity = shape.identity, plan = shape.plan, filter = shape.filter
        let limits = configuration.policy.limits
        var cgroup: SandboxCgroup?
        if let cgroups, limits.memoryBytes != nil || limits.processes != nil {
            let name = "extsandbox-\(getpid())-\(Self.launchCounter.add(1, ordering: .relaxed).newValue)"
            cgroup = try cgroups.makeSandboxCgroup(name: name, memoryBytes: limits.memoryBytes, processes: limits.processes)
        }
        // RLIMIT_AS bounds each process, not their sum (memfds, shared memory, many processes):
        // a whole-sandbox memory limit needs a memory cgroup, or the policy's explicit opt-in.
        if let memory = limits.memoryBytes, limits.memoryScope == .sandbox, !(cgroup?.limitsMemory ?? false) {
            cgroup?.remove()
            throw SandboxError(step: .cgroup, errorNumber: ENOTSUP, detail: CgroupSupport.noMemoryCgroupMessage(limitBytes: memory))
        }
        // The kernel never applies RLIMIT_NPROC to host uid 0 (whatever the namespace), so a
        // sandbox that were host root could have its process limit only from a pids cgroup.
        // HostIdentity never maps to 0; should that change, fail closed.
        if limits.processes != nil && identity.uid == 0 && !(cgroup?.limitsProcesses ?? false) {
            cgroup?.remove()
            throw SandboxError(step: .cgroup, errorNumber: ENOTSUP, detail: "the policy limits processes, but RLIMIT_NPROC does not apply to uid 0 and no pids cgroup is writable here")
        }

        let detached: DetachedBindSources
        do {
            detached = try DetachedBindSources(plan: plan, identity: identity)
        } catch {
            cgroup?.remove()
            throw error
        }
        let arena = CArena()
        var config = xsb_spawn_config()
        // A pre-built sandbox gets what is per launch later (``SandboxPool``): nothing of it here.
        config.hostname = UnsafePointer(arena.string(configuration.hostname))
        config.uid_outside = identity.uid
        config.gid_outside = identity.gid
        config.uid_inside = configuration.sandboxUID
        config.gid_inside = configuration.sandboxGID
        let (ops, opCount) = plan.cOperations(in: arena, detached: detached)
        config.mounts = UnsafePointer(ops)
        config.mount_count = opCount
        let trees = arena.array(of: Int32.self, count: detached.trees.count)
        for (index, tree) in detached.trees.enumerated() { trees[index] = tree.rawValue }
        config.mount_trees = UnsafePointer(trees)
        config.mount_tree_count = detached.trees.count
        config.tmp_size = plan.tmpSize
        let rlimits = ResourceLimitPlan(limits).rlimits
        let cLimits = arena.array(of: xsb_rlimit.self, count: rlimits.count)
        for (index, limit) in rlimits.enumerated() { cLimits[index] = limit }
        config.rlimits = UnsafePointer(cLimits)
        config.rlimit_count = rlimits.count
        let bpf = arena.bytes(filter.program)
        config.bpf = UnsafeRawPointer(bpf)
        config.bpf_instructions = filter.instructionCount
        // (-1: none, in the C launch's terms; the cgroup keeps them open until closeDescriptors.)
        let tasks = cgroup?.tasksFileDescriptors.map(\.rawValue) ?? []
        config.cgroup_tasks_fds = (tasks.count > 0 ? tasks[0] : -1, tasks.count > 1 ? tasks[1] : -1, tasks.count > 2 ? tasks[2] : -1, -1)
        config.cgroup_directory_fd = cgroup?.directoryDescriptor?.rawValue ?? -1
        config.audit = configuration.auditSeccomp ? 1 : 0
        config.memory_deny_write_execute = configuration.policy.seccomp.memoryDenyWriteExecute ? 1 : 0
        config.supervise_first_exec = Self.filterSupervisesExec(configuration.policy) ? 1 : 0
        config.cap_last_cap = capLastCap
        config.setup_timeout_ms = setupTimeoutMilliseconds
        config.init_fd = shape.initExecutable.fd
        if prebuilt {
            config.prebuilt = 1
            config.path = UnsafePointer(arena.string(""))
            config.cwd = UnsafePointer(arena.string(""))
            config.argv = UnsafePointer(arena.stringArray([]))
            config.envp = UnsafePointer(arena.stringArray([]))
            config.stdio = (-1, -1, -1)
            config.exec_fd = -1
        } else {
            Self.setPerLaunch(&config, configuration, executable: shape.executable, stdio: stdio, in: arena)
            config.controlling_terminal = configuration.controllingTerminal ? 1 : 0
        }

        // The configuration and the arena it points into go to the spawner thread whole.
        guard let handed = SpawnerThread.fds(of: config) else {
            cgroup?.remove()
            throw SandboxError(step: .configuration, errorNumber: EMFILE, detail: "at most \(XSB_MAX_EXTRA_FDS) extra file descriptors")
        }
        let request = config
        let (started, _) = await spawner.launch(handing: handed, background: prebuilt) { received in
            var out = xsb_spawn_result()
            var config = request
            let applied = xsb_spawner_apply(&config, &received)
            guard applied == 0 else {
                out.failed_step = Int32(XSB_STEP_FILE_DESCRIPTORS.rawValue)
                out.error_number = -applied
                return (out, ())
            }
            // Root's supplementary groups would follow the sandbox (it cannot drop them). EPERM:
            // setgroups is denied to this supervisor itself (it runs in a user namespace that
            // denies it), so its groups are as fixed as an unprivileged caller's, which the
            // sandbox keeps too.
            let groupsError = identity.remapsRoot ? xsb_clear_thread_groups() : 0
            guard groupsError == 0 || groupsError == EPERM else {
                out.failed_step = Int32(XSB_STEP_USERNS_MAP.rawValue)
                out.error_number = groupsError
                return (out, ())
            }
            withExtendedLifetime(arena) { _ = xsb_spawn_start(&config, &out) }
            return (out, ())
        }
        cgroup?.closeDescriptors()
        // The program's copy and the detached mounts were open until the spawner thread took
        // its own copies of the fds.
        withExtendedLifetime(configuration.executableCopy) {}
        withExtendedLifetime(detached.trees) {}
        // The spawner thread only clones: the build is waited for on the monitor thread.
        let result = started.failed_step == Int32(XSB_STEP_NONE.rawValue)
            ? await LaunchSetupWait.wait(for: started, on: monitor, timeoutMilliseconds: setupTimeoutMilliseconds)
            : started
        return (try Self.succeeded(result, cgroup: cgroup), cgroup)
    }

    /// `result`, or its failure as an error (the sandbox's cgroup removed).
    static func succeeded(_ result: xsb_spawn_result, cgroup: SandboxCgroup?) throws(SandboxError) -> xsb_spawn_result {
        guard result.failed_step == Int32(XSB_STEP_NONE.rawValue) else {
            cgroup?.remove()
            let detail = withUnsafeBytes(of: result.detail) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            throw SandboxError(step: SandboxError.Step(launchCode: result.failed_step), errorNumber: result.error_number, detail: detail)
        }
        return result
    }

    /// What is per launch, in `config`: the program, its arguments, environment, working
    /// directory and fds. (A pre-built sandbox gets them in its launch part.)
    static func setPerLaunch(
        _ config: inout xsb_spawn_config, _ configuration: SandboxConfiguration, executable: String, stdio: (Int32, Int32, Int32), in arena: CArena
    ) {
        config.path = UnsafePointer(arena.string(executable))
        config.argv = UnsafePointer(arena.stringArray(configuration.arguments))
        config.envp = UnsafePointer(arena.stringArray(configuration.environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }))
        config.cwd = UnsafePointer(arena.string(configuration.workingDirectory))
        config.stdio = stdio
        let extra = arena.array(of: Int32.self, count: configuration.extraFileDescriptors.count)
        for (index, fd) in configuration.extraFileDescriptors.enumerated() { extra[index] = fd.rawValue }
        config.extra_fds = UnsafePointer(extra)
        config.extra_fd_count = configuration.extraFileDescriptors.count
        config.exec_fd = configuration.executableCopy?.descriptor.rawValue ?? -1
    }

    /// A started sandbox, watched from now on (its wall-clock limit counts from here).
    func running(_ result: xsb_spawn_result, cgroup: SandboxCgroup?, limits: ResourceLimits) throws(SandboxError) -> SandboxedProcess {
        let process = SandboxedProcess(result: result, monitor: monitor, cgroup: cgroup)
        do {
            try process.startMonitoring()
        } catch {
            process.abandon()
            throw error
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

    /// Whether the policy's filter notifies execve ("no exec after start"), so that the
    /// sandbox init must let the launch's own exec through.
    static func filterSupervisesExec(_ policy: Policy) -> Bool {
        !policy.seccomp.allowExecAfterStart
    }

    private static func fd(_ stream: SandboxConfiguration.StandardStream, _ number: Int32) -> Int32 {
        switch stream {
        case .inherit: return number
        case .null: return -1
        case .fileDescriptor(let fd): return fd.rawValue
        }
    }

    /// The path to exec inside: the given one if a bind exposes it, else its real path, bound
    /// read-only on its own when nothing covers it. The program is what the caller asked to
    /// run, so it is always made visible; nothing else is.
    static func visibleExecutable(_ path: String, plan: inout MountPlan) throws(SandboxError) -> String {
        guard path.hasPrefix("/") else {
            throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "executable \(path) is not an absolute path")
        }
        guard let resolved = SystemFiles.realPath(path) else {
            throw SandboxError(step: .exec, errorNumber: errno, detail: path)
        }
        if plan.exposes(hostPath: path) { return path }
        if !plan.exposes(hostPath: resolved) {
            plan.append(.bind(source: resolved, target: try MountPlan.checkedDestination(resolved), writable: false, directory: false))
        }
        return resolved
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
