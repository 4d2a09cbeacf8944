import SandboxPolicy

/// A resolved policy as `extsandbox policy show --json` prints it: what the sandbox gets, with
/// stable field names (listed in `policy show --help`); a value the policy leaves unset is left out.
struct PolicyJSON: Encodable {
    struct Seccomp: Encodable {
        var `default`: String
        var execAfterStart: Bool
        var memoryDenyWriteExecute: Bool
        /// By system call name, and for one name in the order the filter tries them.
        var rules: [Rule]
    }

    struct Rule: Encodable {
        var syscall: String
        var action: String
        /// Conditions that must all hold, in policy-file syntax; empty: always.
        var when: [String]
        var why: String?
    }

    struct Mount: Encodable {
        /// bind, ro-bind or tmpfs.
        var kind: String
        var source: String?
        var destination: String
        var optional: Bool?
        var sizeBytes: UInt64?
    }

    struct Filesystem: Encodable {
        var mounts: [Mount]
        var masked: [String]
    }

    struct Environment: Encodable {
        var pass: [String]
        var set: [String: String]
    }

    struct Limits: Encodable {
        var memoryBytes: UInt64?
        var memoryScope: String
        var processes: UInt64?
        var cpuSeconds: UInt64?
        var openFiles: UInt64?
        var fileSizeBytes: UInt64?
        var wallClockSeconds: UInt64?
    }

    var name: String
    var description: String
    var file: String?
    var madeFrom: [String]
    var seccomp: Seccomp
    var filesystem: Filesystem
    var network: String
    var environment: Environment
    var limits: Limits
    /// The compiled filter's length as the supervisor loads it; absent if it does not compile.
    var filterInstructions: Int?

    init(_ policy: Policy) {
        name = policy.name
        description = policy.description
        file = policy.sourcePath
        madeFrom = policy.composedFrom
        let byName = Dictionary(grouping: policy.seccomp.rules, by: \.syscall)
        let rules = byName.keys.sorted().flatMap { name -> [SyscallRule] in
            let rules = byName[name] ?? []
            // As the filter tries them: conditional rules by precedence, then the plain one.
            return RulePrecedence.ordered(rules.filter { !$0.conditions.isEmpty }, action: \.action) + rules.filter(\.conditions.isEmpty)
        }
        seccomp = Seccomp(
            default: policy.seccomp.defaultAction.description, execAfterStart: policy.seccomp.allowExecAfterStart,
            memoryDenyWriteExecute: policy.seccomp.memoryDenyWriteExecute,
            rules: rules.map { Rule(syscall: $0.syscall, action: $0.action.description, when: $0.conditions.map(\.description), why: $0.justification) })
        filesystem = Filesystem(mounts: policy.filesystem.mounts.map { entry in
            switch entry {
            case let .bind(source, destination, writable, optional):
                return Mount(kind: writable ? "bind" : "ro-bind", source: source, destination: destination, optional: optional)
            case let .tmpfs(destination, size):
                return Mount(kind: "tmpfs", destination: destination, sizeBytes: size)
            }
        }, masked: policy.filesystem.masked)
        switch policy.network {
        case .none: network = "none"
        }
        environment = Environment(pass: policy.environment.pass, set: policy.environment.set)
        let l = policy.limits
        limits = Limits(memoryBytes: l.memoryBytes, memoryScope: l.memoryScope.rawValue, processes: l.processes, cpuSeconds: l.cpuSeconds,
                        openFiles: l.openFiles, fileSizeBytes: l.fileSizeBytes, wallClockSeconds: l.wallClockSeconds)
        filterInstructions = try? policy.compileSeccompFilter(mode: .supervised).instructionCount
    }
}
