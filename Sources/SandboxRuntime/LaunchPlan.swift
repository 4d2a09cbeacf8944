import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem
import Synchronization

/// One launch, planned on the host before anything of its sandbox exists: what the sandbox is
/// (its ``Shape``) and, unless it is pre-built, what runs in it.
///
/// ``description(cgroup:detached:capLastCap:setupTimeoutMilliseconds:)`` lays the plan out as
/// the `xsb_spawn_config` that `xsb_spawn_start` writes as the sealed launch description, and
/// ``launchPart(_:executable:stdio:)`` lays out what a pre-built sandbox gets per launch: the one
/// place where a launch becomes C.
struct LaunchPlan {
    /// What fixes a launch's sandbox before its program runs, checked on the host: the filter,
    /// the final mount plan (the program's own bind included), the host ids.
    struct Shape {
        let filter: CompiledSeccompFilter
        let plan: MountPlan
        /// The path exec'd inside (or, with a sealed copy, the one named in messages).
        let executable: String
        let identity: HostIdentity
        let initExecutable: InitExecutable
        /// What of the configuration the pool's key takes besides the above.
        private let policy: Policy
        private let hostname: String
        private let audit: Bool
        private let sandboxUID: UInt32
        private let sandboxGID: UInt32
        private let workingDirectory: String

        /// A pre-built sandbox of this shape starts its payload with the shape, to wait for the
        /// launch with its filter loaded (``LaunchPlan/payloadCanWait(under:workingDirectory:)``).
        /// Asked only where a pool is involved: a one-shot launch never needs it.
        var payloadWaits: Bool { LaunchPlan.payloadCanWait(under: filter, workingDirectory: workingDirectory) }

        var key: SandboxPool.Key {
            SandboxPool.Key(
                policy: policy, filter: filter, plan: plan, hostname: hostname, audit: audit,
                sandboxUID: sandboxUID, sandboxGID: sandboxGID, identity: identity, payloadWaits: payloadWaits)
        }

        /// The shape of `configuration`, with the filter and the init the supervisor found for it.
        init(_ configuration: SandboxConfiguration, filter: CompiledSeccompFilter, initExecutable: InitExecutable) throws(SandboxError) {
            var plan = try MountPlan(
                policy: configuration.policy, extraMounts: configuration.extraMounts, dataMounts: configuration.dataMounts,
                hostname: configuration.hostname, uid: configuration.sandboxUID, gid: configuration.sandboxGID)
            let executable = configuration.executableCopy == nil
                ? try Self.visibleExecutable(configuration.executable, plan: &plan) : configuration.executable
            guard FilePaths.isAbsolute(executable) else {
                throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "executable \(executable) is not an absolute path")
            }
            let identity = try HostIdentity.forCaller()
            self.filter = filter
            self.plan = plan
            self.executable = executable
            self.identity = identity
            self.initExecutable = initExecutable
            policy = configuration.policy
            hostname = configuration.hostname
            audit = configuration.auditSeccomp
            sandboxUID = configuration.sandboxUID
            sandboxGID = configuration.sandboxGID
            workingDirectory = configuration.workingDirectory
        }

        /// The path to exec inside: the given one if a bind exposes it, else its real path, bound
        /// read-only on its own when nothing covers it. The program is what the caller asked to
        /// run, so it is always made visible; nothing else is.
        static func visibleExecutable(_ path: String, plan: inout MountPlan) throws(SandboxError) -> String {
            guard FilePaths.isAbsolute(path) else {
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
    }

    let shape: Shape
    /// What the launch was asked for: the shape's policy, hostname, ids and audit mode, and
    /// (unless pre-built) the program, its arguments, environment, working directory and fds.
    let configuration: SandboxConfiguration
    /// The payload's fds 0, 1, 2 as host fds (-1: /dev/null); nil for a pre-built sandbox, which
    /// gets what is per launch later (``SandboxPool``, ``launchPart(_:executable:stdio:)``).
    let stdio: (Int32, Int32, Int32)?

    /// A sandbox that stops once its shape is built and waits for a launch (``SandboxPool``).
    var isPrebuilt: Bool { stdio == nil }

    /// The whole launch as C: the shape, what is per launch (nothing of it when pre-built), the
    /// sandbox's cgroup (``SandboxCgroup/launchDescriptors(of:)``) and detached binds. Fails
    /// (`configuration`, `EMFILE`) when it names more fds than a launch hands over.
    func description(
        cgroup: SandboxCgroup?, detached: DetachedBindSources, capLastCap: Int32, setupTimeoutMilliseconds: Int32
    ) throws(SandboxError) -> LaunchDescription {
        let identity = shape.identity, plan = shape.plan, filter = shape.filter
        let arena = CArena()
        var config = xsb_spawn_config()
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
        let rlimits = ResourceLimitPlan(configuration.policy.limits).rlimits
        let cLimits = arena.array(of: xsb_rlimit.self, count: rlimits.count)
        for (index, limit) in rlimits.enumerated() { cLimits[index] = limit }
        config.rlimits = UnsafePointer(cLimits)
        config.rlimit_count = rlimits.count
        let bpf = arena.bytes(filter.program)
        config.bpf = UnsafeRawPointer(bpf)
        config.bpf_instructions = filter.instructionCount
        let joining = SandboxCgroup.launchDescriptors(of: cgroup)
        config.cgroup_tasks_fds = joining.tasks
        config.cgroup_directory_fd = joining.directory
        config.audit = configuration.auditSeccomp ? 1 : 0
        config.memory_deny_write_execute = configuration.policy.seccomp.memoryDenyWriteExecute ? 1 : 0
        config.supervise_first_exec = Self.filterSupervisesExec(configuration.policy) ? 1 : 0
        config.cap_last_cap = capLastCap
        config.setup_timeout_ms = setupTimeoutMilliseconds
        config.init_fd = shape.initExecutable.fd
        if let stdio {
            Self.setPerLaunch(&config, configuration, executable: shape.executable, stdio: stdio, in: arena)
            config.controlling_terminal = configuration.controllingTerminal ? 1 : 0
        } else {
            config.prebuilt = 1
            config.waiting_payload = shape.payloadWaits ? 1 : 0
            config.path = UnsafePointer(arena.string(""))
            config.cwd = UnsafePointer(arena.string(""))
            config.argv = UnsafePointer(arena.stringArray([]))
            config.envp = UnsafePointer(arena.stringArray([]))
            config.stdio = (-1, -1, -1)
            config.exec_fd = -1
        }
        guard let handed = Self.fds(of: config) else {
            throw SandboxError(step: .configuration, errorNumber: EMFILE, detail: "at most \(XSB_MAX_EXTRA_FDS) extra file descriptors")
        }
        return LaunchDescription(config, arena: arena, handing: handed)
    }

    /// What a pre-built sandbox gets per launch, as C (for `xsb_prebuilt_launch`).
    static func launchPart(_ configuration: SandboxConfiguration, executable: String, stdio: (Int32, Int32, Int32)) -> LaunchDescription {
        let arena = CArena()
        var config = xsb_spawn_config()
        setPerLaunch(&config, configuration, executable: executable, stdio: stdio, in: arena)
        return LaunchDescription(config, arena: arena, handing: [])
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

    /// Whether the policy's filter notifies execve ("no exec after start"), so that the
    /// sandbox init must let the launch's own exec through.
    static func filterSupervisesExec(_ policy: Policy) -> Bool {
        !policy.seccomp.allowExecAfterStart
    }

    /// Whether a pre-built sandbox's payload may wait for its launch with its filter loaded
    /// (`waiting_payload.c`): the filter must allow every call it makes after loading it besides
    /// the exec (which every policy allows, or lets the init supervise), whatever their
    /// pointers: `read` of its go-ahead pipe, a status record's `write`, `exit_group` and,
    /// unless the launch's working directory is the root it already has, `chdir`. Otherwise the
    /// payload is started at the launch, as in a cold one, so waiting never depends on what a
    /// policy lets the program do, and nothing the payload does is notified before the init
    /// reads the filter's notifications. The answer is part of the shape: a launch elsewhere
    /// than `/` under a filter without `chdir` takes sandboxes of its own.
    static func payloadCanWait(under filter: CompiledSeccompFilter, workingDirectory: String) -> Bool {
        let verdict = waitingVerdict(under: filter)
        return verdict.waits && (verdict.changesDirectory || workingDirectory == "/")
    }

    /// What ``payloadCanWait(under:workingDirectory:)`` reads of a filter: whether it lets a
    /// waiting payload wait, and change its directory. Every launch asks (it is part of the
    /// shape), for the few filters of a host's policies: the answers are kept, the last few.
    private static func waitingVerdict(under filter: CompiledSeccompFilter) -> (waits: Bool, changesDirectory: Bool) {
        let kept = waitingVerdicts.withLock { kept -> (waits: Bool, changesDirectory: Bool)? in
            guard let index = kept.firstIndex(where: { $0.filter == filter }) else { return nil }
            let hit = kept.remove(at: index)
            kept.insert(hit, at: 0)
            return (hit.waits, hit.changesDirectory)
        }
        if let kept { return kept }
        guard let read = Syscalls.number(of: "read"), let write = Syscalls.number(of: "write"),
              let exitGroup = Syscalls.number(of: "exit_group"), let chdir = Syscalls.number(of: "chdir") else { return (false, false) }
        func allows(_ number: Int32, _ arguments: [UInt64]) -> Bool {
            filter.evaluate(syscall: number, arguments: arguments) == SeccompReturn.allow
        }
        let pointers: [UInt64] = [0, 0x4c_0000, 0x7ffd_1234_5678, 0xffff_ffff_ffff_f000]
        let waits = pointers.allSatisfy { pointer in
            allows(read, [UInt64(XSB_WAITING_PAYLOAD_GO_FD), pointer, 1])
                && allows(write, [UInt64(XSB_WAITING_PAYLOAD_STATUS_FD), pointer, UInt64(XSB_PAYLOAD_STATUS_RECORD_SIZE)])
        } && allows(exitGroup, [127])
        let changesDirectory = pointers.allSatisfy { allows(chdir, [$0]) }
        waitingVerdicts.withLock { kept in
            guard !kept.contains(where: { $0.filter == filter }) else { return }  // another thread's meanwhile
            kept.insert((filter, waits, changesDirectory), at: 0)
            if kept.count > 8 { kept.removeLast() }
        }
        return (waits, changesDirectory)
    }

    private static let waitingVerdicts = Mutex<[(filter: CompiledSeccompFilter, waits: Bool, changesDirectory: Bool)]>([])

    /// The fds a launch with `config` hands to the spawner thread, in the order the spawner
    /// places them. (nil: more extra fds or detached binds than a launch takes.)
    private static func fds(of config: xsb_spawn_config) -> [Int32]? {
        var config = config
        var listed = [Int32](repeating: -1, count: Int(XSB_SPAWNER_MAX_FDS))
        let count = listed.withUnsafeMutableBufferPointer { xsb_spawner_list_fds(&config, $0.baseAddress) }
        return count >= 0 ? Array(listed.prefix(Int(count))) : nil
    }
}

/// A launch laid out in C: the `xsb_spawn_config` and the arena it points into, which live
/// together until the launch has been written out (handed to the spawner thread whole), and the
/// host fds it names. The fds stay their owners' (the configuration's, the cgroup's, the
/// detached binds'): they must be open until the spawner thread has its copies.
final class LaunchDescription {
    private var config: xsb_spawn_config
    private let arena: CArena
    /// The host fds the config names, in the order of a hand-over (`xsb_spawner_list_fds`).
    let handedFileDescriptors: [Int32]

    fileprivate init(_ config: xsb_spawn_config, arena: CArena, handing fds: [Int32]) {
        self.config = config
        self.arena = arena
        handedFileDescriptors = fds
    }

    /// Runs `body` with the config, its arena alive throughout.
    func withConfiguration<Result>(_ body: (inout xsb_spawn_config) -> Result) -> Result {
        withExtendedLifetime(arena) { body(&config) }
    }
}
