import SandboxPolicy
import SandboxSystem

/// Everything a launch needs: the program, its arguments and environment, the policy that
/// confines it, and what the caller adds to the policy's file system.
public struct SandboxConfiguration: Sendable {
    /// Where the payload's standard streams come from.
    public enum StandardStream: Sendable, Equatable {
        /// The supervisor's own stream of the same number: only on purpose (the default is
        /// `.null`), since it is often a terminal, which the program could then read and reconfigure.
        case inherit
        /// /dev/null inside the sandbox.
        case null
        /// A descriptor of the supervisor's process: the configuration holds it (it closes when
        /// the caller and every copy of the configuration let it go); the sandbox gets its own
        /// copy at launch, so the caller may let it go once the launch returns.
        case fileDescriptor(FileDescriptor)

        public static func == (lhs: StandardStream, rhs: StandardStream) -> Bool {
            switch (lhs, rhs) {
            case (.inherit, .inherit), (.null, .null): true
            case (.fileDescriptor(let x), .fileDescriptor(let y)): x === y
            default: false
            }
        }

        /// The descriptor of ``fileDescriptor(_:)``, else nil.
        var descriptor: FileDescriptor? {
            if case .fileDescriptor(let descriptor) = self { descriptor } else { nil }
        }
    }

    /// Absolute path of the program. It is exec'd at the same path inside the sandbox, unless
    /// ``executableCopy`` is given.
    public var executable: String
    /// The program as a sealed copy, exec'd through its descriptor instead of by path: what runs
    /// is exactly that copy, whatever happens to ``executable``'s path meanwhile, and nothing is
    /// bound into the sandbox for it (``executable`` then only names it in messages). A `#!`
    /// script's interpreter, which the kernel opens by path inside the sandbox, reads the copy
    /// as `/dev/fd/N`, N being 3 + the number of ``extraFileDescriptors``.
    public var executableCopy: SealedExecutable?
    /// The full argv, argv[0] included.
    public var arguments: [String]
    /// The complete environment inside. Build it with ``SandboxEnvironment/compose(policy:caller:overrides:)``.
    public var environment: [String: String]
    public var policy: Policy
    /// The policy's seccomp filter compiled in `.supervised` mode, for example from a cache;
    /// `nil` lets the supervisor compile it (once per distinct policy).
    public var compiledFilter: CompiledSeccompFilter?
    /// Binds and tmpfs mounts added after the policy's own.
    public var extraMounts: [MountEntry]
    /// Binds of data, added after ``extraMounts``: read-only or not as each says, and always
    /// `noexec`, so that nothing under them can be exec'd, used as an interpreter or loader, or
    /// mapped executable (an extension's resources).
    public var dataMounts: [MountEntry] = []
    /// The working directory inside the sandbox.
    public var workingDirectory: String
    public var hostname: String
    public var standardInput: StandardStream
    public var standardOutput: StandardStream
    public var standardError: StandardStream
    /// Descriptors of the supervisor's process that become the payload's fds 3, 4, … in order
    /// (at most 32), held as ``StandardStream/fileDescriptor(_:)`` holds its one.
    public var extraFileDescriptors: [FileDescriptor]
    /// Audit mode: calls the filter would kill are allowed and recorded instead (see
    /// ``SandboxedProcess/auditedSyscalls``). The namespaces, mounts, capabilities and limits
    /// stay as strict as ever; only the seccomp kills become reports. For writing policies.
    public var auditSeccomp: Bool
    /// Makes the first of the payload's standard streams that is a terminal its controlling
    /// terminal (after its `setsid`), so that the terminal's signal keys, window size changes and
    /// a shell's job control work inside. Only for a pseudo-terminal the caller owns and relays
    /// (as `extsandbox exec` does): never hand in the caller's own terminal.
    public var controllingTerminal = false
    /// The one uid and gid the caller's ids map to inside.
    public var sandboxUID: UInt32
    public var sandboxGID: UInt32

    public init(
        executable: String, arguments: [String]? = nil, environment: [String: String] = [:],
        policy: Policy, extraMounts: [MountEntry] = [], workingDirectory: String = "/",
        hostname: String = "extsandbox",
        standardInput: StandardStream = .null, standardOutput: StandardStream = .null,
        standardError: StandardStream = .null, extraFileDescriptors: [FileDescriptor] = [], auditSeccomp: Bool = false,
        sandboxUID: UInt32 = 1000, sandboxGID: UInt32 = 1000
    ) {
        self.executable = executable
        self.executableCopy = nil
        self.arguments = arguments ?? [executable]
        self.environment = environment
        self.policy = policy
        self.compiledFilter = nil
        self.extraMounts = extraMounts
        self.workingDirectory = workingDirectory
        self.hostname = hostname
        self.standardInput = standardInput
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.extraFileDescriptors = extraFileDescriptors
        self.auditSeccomp = auditSeccomp
        self.sandboxUID = sandboxUID
        self.sandboxGID = sandboxGID
    }
}

/// Builds the environment of a sandboxed program from its policy.
public enum SandboxEnvironment {
    /// The caller's variables that the policy passes, then the policy's fixed ones, then
    /// `overrides` (for example from `--env`). Nothing else of the caller's leaks in.
    public static func compose(
        policy: Policy, caller: [String: String], overrides: [String: String] = [:]
    ) -> [String: String] {
        var result: [String: String] = [:]
        for name in policy.environment.pass {
            if let value = caller[name] { result[name] = value }
        }
        result.merge(policy.environment.set) { _, new in new }
        result.merge(overrides) { _, new in new }
        return result
    }
}
