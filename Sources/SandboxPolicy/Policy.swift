/// A resolved sandbox policy: what one sandboxed process may do.
///
/// Admins write policies as YAML files in `Policies/` (see `docs/policy-format.md`);
/// ``PolicyLoader`` parses and validates them into this model, and
/// ``Policy/compileSeccompFilter(mode:)`` turns the `seccomp` part into a BPF program.
/// The runtime consumes this type only; it never reads policy files itself.
public struct Policy: Sendable, Equatable {
    /// The policy's name (`standard`, `restricted`, …), from its file name.
    public var name: String
    /// The file it came from, for messages; `nil` for policies built in code.
    public var sourcePath: String?
    public var description: String

    public var seccomp: SeccompPolicy
    public var filesystem: FilesystemPolicy
    public var network: NetworkPolicy
    public var environment: EnvironmentPolicy
    public var limits: ResourceLimits
    /// Every file this policy was made from (`extends:` bases and `include:` fragments first, the
    /// policy's own file last), in merge order. Empty for policies built in code.
    public var composedFrom: [String]

    public init(
        name: String, sourcePath: String? = nil, description: String = "",
        seccomp: SeccompPolicy, filesystem: FilesystemPolicy = .init(),
        network: NetworkPolicy = .none, environment: EnvironmentPolicy = .init(),
        limits: ResourceLimits = .init(), composedFrom: [String] = []
    ) {
        self.name = name
        self.sourcePath = sourcePath
        self.description = description
        self.seccomp = seccomp
        self.filesystem = filesystem
        self.network = network
        self.environment = environment
        self.limits = limits
        self.composedFrom = composedFrom
    }
}

/// What the filter does with a system call.
public enum SyscallAction: Sendable, Equatable, Hashable {
    /// The call runs.
    case allow
    /// The call fails with this errno (for example `EPERM` = 1) and does not run.
    case errno(Int32)
    /// The whole sandbox is killed and the violation is reported with the syscall's name.
    case killProcess
    /// The call runs and the kernel logs it.
    case log
}

/// A comparison of one syscall argument, as seccomp can express it.
public struct ArgumentCondition: Sendable, Equatable, Hashable {
    public enum Operator: Sendable, Equatable, Hashable {
        case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual
        /// `(arg & mask) == value`
        case maskedEqual(mask: UInt64)
    }
    /// Argument index, 0…5.
    public var index: Int
    public var op: Operator
    public var value: UInt64

    public init(index: Int, op: Operator, value: UInt64) {
        self.index = index
        self.op = op
        self.value = value
    }
}

/// One rule of the filter: a syscall, an action, and the conditions (all must hold) under which it applies.
public struct SyscallRule: Sendable, Equatable, Hashable {
    public var syscall: String
    public var action: SyscallAction
    public var conditions: [ArgumentCondition]
    /// Why a dangerous syscall is allowed; required by `policy check` for those.
    public var justification: String?

    public init(syscall: String, action: SyscallAction, conditions: [ArgumentCondition] = [], justification: String? = nil) {
        self.syscall = syscall
        self.action = action
        self.conditions = conditions
        self.justification = justification
    }
}

/// The seccomp part of a policy, with every group already expanded to syscall names.
public struct SeccompPolicy: Sendable, Equatable {
    /// What happens to any syscall no rule names.
    public var defaultAction: SyscallAction
    public var rules: [SyscallRule]
    /// Whether the sandboxed program may run other programs (`execve`, `execveat`) once started.
    ///
    /// When `false` (policy key `seccomp.allow-exec-after-start: false`), a `.supervised` filter
    /// sends every `execve` and `execveat` to the supervisor (`SCMP_ACT_NOTIFY`), which lets exactly
    /// the first `execve` — the sandbox's own launch of its program — continue and kills the
    /// sandbox on any later one; whatever ``rules`` say about those two calls is ignored. Such a
    /// policy cannot be compiled in `.inKernel` mode: a filter keeps no state, so it cannot tell
    /// the launch from a later exec.
    public var allowExecAfterStart: Bool
    /// Whether no page of the sandboxed program may ever be writable and executable, at once or in
    /// turn (policy key `seccomp.memory-deny-write-execute`): the launch sets the kernel's
    /// memory-deny-write-execute (`prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)`) before loading
    /// the filter, it survives `execve` and is inherited by children, and the launch fails if the
    /// kernel refuses it. `mmap` with `PROT_WRITE|PROT_EXEC` and `mprotect` that adds `PROT_EXEC`
    /// then fail with `EACCES`, for file mappings too.
    public var memoryDenyWriteExecute: Bool

    public init(
        defaultAction: SyscallAction = .killProcess, rules: [SyscallRule] = [], allowExecAfterStart: Bool = true,
        memoryDenyWriteExecute: Bool = false
    ) {
        self.defaultAction = defaultAction
        self.rules = rules
        self.allowExecAfterStart = allowExecAfterStart
        self.memoryDenyWriteExecute = memoryDenyWriteExecute
    }
}

/// One entry of the sandbox's file system, applied in order on top of an empty tmpfs root.
public enum MountEntry: Sendable, Equatable {
    /// Bind `source` (a host path) to `destination` inside. Read-only unless `writable`.
    /// An `optional` bind is skipped when the source does not exist; any other missing source fails the launch.
    case bind(source: String, destination: String, writable: Bool, optional: Bool)
    /// A fresh tmpfs of at most `sizeBytes`.
    case tmpfs(destination: String, sizeBytes: UInt64)
}

public struct FilesystemPolicy: Sendable, Equatable {
    public var mounts: [MountEntry]
    /// Paths hidden from the sandbox (an empty, read-only mount over them).
    public var masked: [String]

    public init(mounts: [MountEntry] = [], masked: [String] = []) {
        self.mounts = mounts
        self.masked = masked
    }
}

public enum NetworkPolicy: Sendable, Equatable {
    /// A network namespace with nothing but loopback. The default.
    case none
}

public struct EnvironmentPolicy: Sendable, Equatable {
    /// Names of the caller's variables that pass into the sandbox.
    public var pass: [String]
    /// Variables set inside, overriding passed ones.
    public var set: [String: String]

    public init(pass: [String] = [], set: [String: String] = [:]) {
        self.pass = pass
        self.set = set
    }
}

/// What a policy's memory limit bounds.
public enum MemoryScope: String, Sendable, Equatable, CaseIterable {
    /// The whole sandbox, through a cgroup; a launch where no memory cgroup is writable fails.
    case sandbox
    /// Each process on its own (RLIMIT_AS), so a sandbox may hold up to the limit times its
    /// process limit. An admin's explicit opt-in for hosts without a delegated cgroup.
    case perProcess = "per-process"
}

/// Resource limits. `nil` means "not limited by this policy".
public struct ResourceLimits: Sendable, Equatable {
    /// Memory in bytes: always an address-space rlimit per process, and for the whole sandbox a
    /// cgroup limit unless ``memoryScope`` is ``MemoryScope/perProcess``.
    public var memoryBytes: UInt64?
    /// Whether ``memoryBytes`` must hold for the whole sandbox (the default) or per process.
    public var memoryScope: MemoryScope
    /// Processes and threads in the sandbox.
    public var processes: UInt64?
    public var cpuSeconds: UInt64?
    public var openFiles: UInt64?
    public var fileSizeBytes: UInt64?
    /// Wall-clock time after which the supervisor kills the sandbox.
    public var wallClockSeconds: UInt64?

    public init(
        memoryBytes: UInt64? = nil, processes: UInt64? = nil, cpuSeconds: UInt64? = nil,
        openFiles: UInt64? = nil, fileSizeBytes: UInt64? = nil, wallClockSeconds: UInt64? = nil,
        memoryScope: MemoryScope = .sandbox
    ) {
        self.memoryBytes = memoryBytes
        self.memoryScope = memoryScope
        self.processes = processes
        self.cpuSeconds = cpuSeconds
        self.openFiles = openFiles
        self.fileSizeBytes = fileSizeBytes
        self.wallClockSeconds = wallClockSeconds
    }
}

