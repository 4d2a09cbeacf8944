/// The checks of one system call's rules that both the resolver (on the merged policy files, with
/// each problem's file and line) and the compiler (on any ``Policy``, one built in code too) make.
/// One definition each, so that what loads and what compiles can never disagree.
package enum SeccompRuleCheck {
    /// The conditional rules that can never change what happens to a call, as indices into
    /// `ordered` (the rules' actions in ``RulePrecedence`` order): a rule whose action is the
    /// fallback's, as is that of every rule after it, gives each call it matches what the call
    /// would get without it.
    package static func rulesWithoutEffect(_ ordered: [SyscallAction], fallback: SyscallAction) -> [Int] {
        ordered.indices.filter { index in ordered[index...].allSatisfy { $0 == fallback } }
    }

    /// Whether `execve` lets the sandbox start its program after the filter is loaded: it must
    /// run (allow or log) without conditions.
    static func execveRuns(fallback: SyscallAction, hasConditionalRules: Bool) -> Bool {
        (fallback == .allow || fallback == .log) && !hasConditionalRules
    }

    /// The system calls that `allow-exec-after-start: false` hands to the supervisor: no rule
    /// may decide them.
    static let execCalls = ["execve", "execveat"]

    /// Why a rule for `syscall` cannot take effect because a built-in refusal answers every call
    /// it matches, or `nil` (see ``BuiltinRefusals/ineffectiveRule(syscall:action:conditions:)``).
    static func refusedByBuiltins(_ rule: SyscallRule) -> String? {
        BuiltinRefusals.ineffectiveRule(syscall: rule.syscall, action: rule.action, conditions: rule.conditions)
    }
}
