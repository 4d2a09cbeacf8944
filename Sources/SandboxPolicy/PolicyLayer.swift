/// One policy file, parsed and checked on its own: what it says, before `extends:` and `include:`
/// are followed and the files are merged (``PolicyResolver``). Every position it keeps names
/// its file, so problems found after merging point into the right file.
struct PolicyLayer {
    struct Reference {
        var target: String
        var loc: Loc
    }

    /// One entry of a syscall list, with groups already expanded (and checked).
    struct ListItem {
        var remove: Bool
        var names: [String]
        /// As written, without `~`: `@system-service`, `openat`.
        var item: String
        var loc: Loc
    }

    /// One list: `allow`, `log`, `kill`, or `errno NAME`.
    struct ListSection {
        var section: String
        var action: SyscallAction
        var items: [ListItem]
    }

    struct RuleEntry {
        var syscall: String
        var action: SyscallAction
        var conditions: [ArgumentCondition]
        var why: String?
        var loc: Loc
    }

    struct Mount {
        var entry: MountEntry
        var destination: String
        var loc: Loc
    }

    var file: String
    var description: String?
    var extends: Reference?
    var includes: [Reference] = []

    /// Where the file's `seccomp` key is, if it has one.
    var seccompLoc: Loc?
    /// The seccomp section had problems: merged seccomp checks would only add noise.
    var seccompBroken = false
    var defaultAction: (action: SyscallAction, loc: Loc)?
    var allowExecAfterStart: (value: Bool, loc: Loc)?
    /// `seccomp.memory-deny-write-execute`, when this file sets it.
    var memoryDenyWriteExecute: (value: Bool, loc: Loc)?
    var lists: [ListSection] = []
    var rules: [RuleEntry] = []

    var mounts: [Mount] = []
    var masked: [String] = []
    var network: (mode: NetworkPolicy, loc: Loc)?
    var pass: [String] = []
    var set: [(name: String, value: String)] = []
    /// Limit key → value; `nil` when the file says `none`. `memory-scope` is the index of its
    /// value in `MemoryScope.allCases`.
    var limits: [(key: String, value: UInt64?)] = []
}
