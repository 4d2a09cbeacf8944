import CSandboxShim

extension SandboxError {
    /// The step of a launch (or of a lifecycle operation) that failed.
    ///
    /// The steps the sandbox init and the payload take between clone and exec each have a case
    /// of their own, one per `XSB_STEP_*` constant of CSandboxShim's `xsb_step`; a constant this
    /// Swift code does not know (a newer C side) arrives as ``unknown(_:)``. The rest are the
    /// supervisor's own work before and after: ``policy``, ``configuration``, ``cgroup`` and
    /// ``control``.
    public enum Step: Sendable, Hashable, CustomStringConvertible {
        /// The supervisor's control socket pair to the init.
        case socketPair
        /// `clone3` into the new namespaces.
        case clone
        /// The user namespace's uid and gid maps (and the supervisor's supplementary groups).
        case userNamespaceMap
        /// Moving the init into its cgroups.
        case cgroupAttach
        /// The init's handshake with the supervisor.
        case handshake
        /// The init's parent-death signal.
        case parentDeathSignal
        /// Unsharing the cgroup namespace.
        case cgroupNamespace
        /// Setting the sandbox's hostname.
        case hostname
        /// Bringing the loopback interface up.
        case loopback
        /// Making mount propagation private.
        case mountPrivate
        /// The tmpfs that becomes the sandbox's root.
        case rootTmpfs
        /// `pivot_root` into the new root.
        case pivotRoot
        /// A bind mount of the policy or the caller (its source is in the detail).
        case bindMount
        /// A tmpfs mount.
        case tmpfsMount
        /// The sandbox's `/proc`.
        case procMount
        /// The sandbox's `/dev`.
        case devSetup
        /// Creating a file (a mount point, a masked path) in the new root.
        case fileCreate
        /// Creating a symlink in the new root.
        case symlink
        /// Making the root read-only.
        case rootReadOnly
        /// Starting the payload.
        case spawnPayload
        /// The payload's new session.
        case session
        /// Resetting the payload's signal dispositions and mask.
        case signals
        /// Placing the payload's file descriptors.
        case fileDescriptors
        /// The payload's working directory.
        case workingDirectory
        /// A resource limit (rlimit) of the payload.
        case resourceLimit
        /// Dropping every capability.
        case capabilities
        /// `PR_SET_NO_NEW_PRIVS`.
        case noNewPrivs
        /// Loading the seccomp filter.
        case seccomp
        /// `execve` of the program (or finding it on the host).
        case exec
        /// The launch took longer than the supervisor's setup timeout.
        case timeout
        /// Hiding the init (its memory, fds, command line) from the sandbox.
        case initPrivacy
        /// `PR_SET_MDWE`, memory-deny-write-execute.
        case memoryDenyWriteExecute
        /// Starting the sandbox init (`xsb-init`, exec'd by fd) in the new namespaces.
        case initExec
        /// Writing (supervisor) or reading and checking (init) the launch description.
        case launchDescription
        /// A step the C side reported that this code has no case for: its `xsb_step` value.
        case unknown(Int32)
        /// Compiling the policy's seccomp filter.
        case policy
        /// The launch's configuration (paths, mounts, file descriptors, ids), checked on the host.
        case configuration
        /// Creating, limiting or removing the sandbox's cgroups.
        case cgroup
        /// A lifecycle operation on a running sandbox (its control socket, the monitor thread).
        case control

        /// Each C launch step with its `xsb_step` constant: the one place the two are paired.
        /// Names stay in the C table (`xsb_step_name`), next to the constants.
        private static let launchSteps: [(code: xsb_step, step: Step)] = [
            (XSB_STEP_SOCKETPAIR, .socketPair), (XSB_STEP_CLONE, .clone), (XSB_STEP_USERNS_MAP, .userNamespaceMap),
            (XSB_STEP_CGROUP_ATTACH, .cgroupAttach), (XSB_STEP_HANDSHAKE, .handshake),
            (XSB_STEP_PARENT_DEATH_SIGNAL, .parentDeathSignal), (XSB_STEP_CGROUP_NAMESPACE, .cgroupNamespace),
            (XSB_STEP_HOSTNAME, .hostname), (XSB_STEP_LOOPBACK, .loopback), (XSB_STEP_MOUNT_PRIVATE, .mountPrivate),
            (XSB_STEP_ROOT_TMPFS, .rootTmpfs), (XSB_STEP_PIVOT_ROOT, .pivotRoot), (XSB_STEP_BIND_MOUNT, .bindMount),
            (XSB_STEP_TMPFS_MOUNT, .tmpfsMount), (XSB_STEP_PROC_MOUNT, .procMount), (XSB_STEP_DEV_SETUP, .devSetup),
            (XSB_STEP_FILE_CREATE, .fileCreate), (XSB_STEP_SYMLINK, .symlink), (XSB_STEP_ROOT_READONLY, .rootReadOnly),
            (XSB_STEP_SPAWN_PAYLOAD, .spawnPayload), (XSB_STEP_SESSION, .session), (XSB_STEP_SIGNALS, .signals),
            (XSB_STEP_FILE_DESCRIPTORS, .fileDescriptors), (XSB_STEP_WORKING_DIRECTORY, .workingDirectory),
            (XSB_STEP_RLIMIT, .resourceLimit), (XSB_STEP_CAPABILITIES, .capabilities),
            (XSB_STEP_NO_NEW_PRIVS, .noNewPrivs), (XSB_STEP_SECCOMP, .seccomp), (XSB_STEP_EXEC, .exec),
            (XSB_STEP_TIMEOUT, .timeout), (XSB_STEP_INIT_PRIVACY, .initPrivacy),
            (XSB_STEP_MEMORY_DENY_WRITE_EXECUTE, .memoryDenyWriteExecute),
            (XSB_STEP_INIT_EXEC, .initExec), (XSB_STEP_LAUNCH_DESCRIPTION, .launchDescription),
        ]

        /// The step a C launch reports (`xsb_spawn_result.failed_step`, an `enum xsb_step`):
        /// ``unknown(_:)`` for a value without a case here.
        init(launchCode code: Int32) {
            self = Self.launchSteps.first { Int32($0.code.rawValue) == code }?.step ?? .unknown(code)
        }

        /// The step's `xsb_step` value, for a step of the C launch; `nil` for the supervisor's own.
        var launchCode: Int32? {
            if case .unknown(let code) = self { return code }
            return Self.launchSteps.first { $0.step == self }.map { Int32($0.code.rawValue) }
        }

        /// The step's name, e.g. "bind mount" or "seccomp filter".
        public var name: String {
            switch self {
            case .policy: return "policy"
            case .configuration: return "configuration"
            case .cgroup: return "cgroup"
            case .control: return "control"
            case .unknown(let code):
                let known = String(cString: xsb_step_name(code))
                return known == "unknown step" ? "unknown launch step \(code)" : known
            default: return launchCode.map { String(cString: xsb_step_name($0)) } ?? "unknown step"
            }
        }

        public var description: String { name }
    }
}
