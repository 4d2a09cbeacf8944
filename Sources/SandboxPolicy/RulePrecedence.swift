extension SyscallAction {
    /// How much the action restricts the call: `kill` (3) > `errno` (2) > `log` (1) > `allow` (0).
    ///
    /// One ranking serves the whole language: when lists name a system call more than once, and
    /// when several conditional rules of one system call match the same call, the strongest
    /// action wins (as the kernel ranks the answers of stacked filters).
    public var strength: Int {
        switch self {
        case .allow: 0
        case .log: 1
        case .errno: 2
        case .killProcess: 3
        }
    }
}

/// The order of precedence among the conditional rules of one system call
/// (docs/policy-format.md, "How rules combine").
///
/// A call is decided by the first rule, in this order, whose conditions all hold: rules with a
/// stronger action come first (`kill`, then `errno`, `log`, `allow`), rules with equally strong
/// actions (two errnos) keep their order in the policy (after `extends` and `include` are
/// merged). A call that no rule matches gets the system call's fallback. The compiled filter
/// tests the rules in exactly this order, and the compiler checks it with its BPF interpreter.
public enum RulePrecedence {
    /// `rules` (the conditional rules of one system call, in policy order) in the order they are tried.
    public static func ordered<Rule>(_ rules: [Rule], action: (Rule) -> SyscallAction) -> [Rule] {
        rules.enumerated()
            .sorted { a, b in
                let sa = action(a.element).strength, sb = action(b.element).strength
                return sa != sb ? sa > sb : a.offset < b.offset
            }
            .map(\.element)
    }

    /// What the rules give a call with these arguments: the first matching rule's action in
    /// precedence order, else `fallback`. The reference the compiled filter is checked against.
    public static func decide(_ rules: [SyscallRule], fallback: SyscallAction, arguments: [UInt64]) -> SyscallAction {
        for rule in ordered(rules, action: \.action)
        where rule.conditions.allSatisfy({ $0.holds(for: $0.index < arguments.count ? arguments[$0.index] : 0) }) {
            return rule.action
        }
        return fallback
    }
}
