import CSeccomp
#if canImport(Glibc)
import Glibc
import SandboxSystem
#endif

/// How `kill` actions are compiled.
public enum FilterMode: Sendable {
    /// Kill actions (default and per-rule) compile to `SCMP_ACT_NOTIFY`: the supervisor receives the
    /// notification, records the syscall, and kills the sandbox. The filter must be installed with
    /// `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
    case supervised
    /// Kill actions compile to `SCMP_ACT_KILL_PROCESS` (for tests and tools without a supervisor).
    case inKernel
}

/// A ready seccomp BPF program.
public struct CompiledSeccompFilter: Sendable, Equatable {
    /// The BPF program: an array of struct sock_filter (8 bytes each), ready for seccomp(SECCOMP_SET_MODE_FILTER).
    public let program: [UInt8]
    public var instructionCount: Int { program.count / 8 }

    public init(program: [UInt8]) {
        self.program = program
    }
}

/// Raw seccomp return values (`SECCOMP_RET_*`), for reading ``CompiledSeccompFilter/evaluate(syscall:arguments:architecture:instructionPointer:)``.
public enum SeccompReturn {
    public static let killProcess: UInt32 = 0x8000_0000
    public static let killThread: UInt32 = 0x0000_0000
    public static let trap: UInt32 = 0x0003_0000
    public static let errno: UInt32 = 0x0005_0000
    public static let userNotif: UInt32 = 0x7fc0_0000
    public static let trace: UInt32 = 0x7ff0_0000
    public static let log: UInt32 = 0x7ffc_0000
    public static let allow: UInt32 = 0x7fff_0000
    public static let actionMask: UInt32 = 0xffff_0000
    public static let dataMask: UInt32 = 0x0000_ffff

    /// `AUDIT_ARCH_X86_64`, `AUDIT_ARCH_I386`.
    public static let archX86_64: UInt32 = 0xc000_003e
    public static let archI386: UInt32 = 0x4000_0003
    /// The x32 ABI marks its syscall numbers with this bit (on the x86_64 audit arch).
    public static let x32SyscallBit: Int32 = 0x4000_0000
}

extension Policy {
    /// Compiles the seccomp part of the policy to a BPF program for the native architecture (x86_64).
    ///
    /// - Foreign architectures (i386 `int 0x80`, x32 syscall numbers) are killed in the kernel.
    /// - `clone3` always fails with `ENOSYS`, so the C library falls back to `clone`, whose flags
    ///   the filter can check; a policy that gives `clone3` another action is an error.
    /// - Built-in refusals apply wherever the policy lets a call run (see ``BuiltinRefusals``):
    ///   setuid and setgid mode bits fail with `EPERM`, `openat2` with `ENOSYS`, and a nested
    ///   seccomp filter with `EPERM`; a `kill` or an `errno` of the policy always wins over them.
    /// - `execve` must be allowed without conditions (the sandbox execs its program after loading).
    /// - For a syscall with conditional rules, a call gets the action of the first rule whose
    ///   conditions hold in ``RulePrecedence`` order (the strongest action first; equally strong
    ///   ones in rule order); calls that match no rule get the syscall's unconditional rule (if
    ///   any), else the default action.
    ///
    /// Pure: it never loads a filter into the current process.
    public func compileSeccompFilter(mode: FilterMode = .supervised) throws(PolicyError) -> CompiledSeccompFilter {
        try SeccompCompiler(policy: self, mode: mode).compile()
    }
}

struct SeccompCompiler {
    let policy: Policy
    let mode: FilterMode

    var file: String { policy.sourcePath ?? policy.name }

    func fail(_ message: String) -> PolicyError {
        PolicyError(file: file, message: message)
    }

    func scmpAction(_ action: SyscallAction) -> UInt32 {
        switch action {
        case .allow: return xsb_scmp_act_allow()
        case .log: return xsb_scmp_act_log()
        case .errno(let e): return xsb_scmp_act_errno(UInt16(clamping: e))
        case .killProcess: return mode == .supervised ? xsb_scmp_act_notify() : xsb_scmp_act_kill_process()
        }
    }

    func scmpCondition(_ c: ArgumentCondition) -> scmp_arg_cmp {
        var cmp = scmp_arg_cmp()
        cmp.arg = UInt32(c.index)
        cmp.datum_a = c.value
        cmp.datum_b = 0
        switch c.op {
        case .equal: cmp.op = SCMP_CMP_EQ
        case .notEqual: cmp.op = SCMP_CMP_NE
        case .less: cmp.op = SCMP_CMP_LT
        case .lessOrEqual: cmp.op = SCMP_CMP_LE
        case .greater: cmp.op = SCMP_CMP_GT
        case .greaterOrEqual: cmp.op = SCMP_CMP_GE
        case .maskedEqual(let mask):
            cmp.op = SCMP_CMP_MASKED_EQ
            cmp.datum_a = mask
            cmp.datum_b = c.value
        }
        return cmp
    }

    /// What one syscall does, after validation.
    struct Plan {
        var number: Int32
        var plain: SyscallAction?
        /// In precedence order (``RulePrecedence``).
        var conditional: [SyscallRule] = []
    }

    /// Whether libseccomp's own conditional rules express `plan` exactly: one conditional action,
    /// not the default (libseccomp refuses a rule whose action is the filter's default). Other
    /// plans are compiled as a ``RuleChain``.
    func libseccompExpresses(_ plan: Plan) -> Bool {
        let actions = Set(plan.conditional.map { scmpAction($0.action) })
        return actions.count == 1 && actions.first != scmpAction(policy.seccomp.defaultAction)
    }

    func plan() throws(PolicyError) -> [(String, Plan)] {
        var plans: [String: Plan] = [:]
        for rule in policy.seccomp.rules {
            guard let number = Syscalls.number(of: rule.syscall) else {
                throw fail("unknown system call \"\(rule.syscall)\" on x86_64\(Suggest.hint(for: rule.syscall, in: Syscalls.allNames))")
            }
            for c in rule.conditions where !(0...5).contains(c.index) {
                throw fail("bad argument index \(c.index) in a rule for \(rule.syscall): system calls have arguments 0 to 5")
            }
            if !rule.conditions.isEmpty, let reason = SeccompRuleCheck.refusedByBuiltins(rule) {
                throw fail("a rule that lets \(rule.syscall) run has no effect: \(reason)")
            }
            var p = plans[rule.syscall] ?? Plan(number: number)
            if rule.conditions.isEmpty {
                if let existing = p.plain, existing != rule.action {
                    throw fail("\(rule.syscall) has two rules without conditions (\(existing) and \(rule.action))")
                }
                p.plain = rule.action
            } else {
                p.conditional.append(rule)
            }
            plans[rule.syscall] = p
        }
        for (name, p) in plans where !p.conditional.isEmpty {
            let ordered = RulePrecedence.ordered(p.conditional, action: \.action)
            let fallback = p.plain ?? policy.seccomp.defaultAction
            for index in SeccompRuleCheck.rulesWithoutEffect(ordered.map(\.action), fallback: fallback) {
                throw fail("a conditional rule for \(name) has no effect: \(name) gets \(ordered[index].action) anyway")
            }
            plans[name]!.conditional = ordered
        }

        if let c3 = plans["clone3"], c3.plain != .errno(38) || !c3.conditional.isEmpty {
            throw fail("clone3 must fail with ENOSYS: \(PolicyParser.clone3Explanation)")
        }
        plans["clone3"] = Plan(number: Syscalls.number(of: "clone3")!, plain: .errno(38))

        if policy.seccomp.allowExecAfterStart {
            let execve = plans["execve"]
            let execveAction = execve?.plain ?? policy.seccomp.defaultAction
            guard SeccompRuleCheck.execveRuns(fallback: execveAction, hasConditionalRules: !(execve?.conditional.isEmpty ?? true)) else {
                throw fail("execve must be allowed without conditions: the sandbox starts its program with execve after loading the filter")
            }
        } else {
            // No exec after start: the supervisor answers every execve and execveat (SCMP_ACT_NOTIFY),
            // lets exactly the first execve (its own launch of the program) continue and kills the
            // sandbox on any later one. A filter keeps no state, so it cannot do this by itself.
            guard mode == .supervised else {
                throw fail("allow-exec-after-start: false cannot be compiled for the kernel alone (.inKernel): the filter must let exactly one execve through, the sandbox's own launch of its program, and kill later ones, but a seccomp filter keeps no state to count calls; only the supervisor (.supervised mode), which answers each execve notification, can tell the launch from a later exec")
            }
            for name in SeccompRuleCheck.execCalls {
                if let existing = plans[name], !existing.conditional.isEmpty {
                    throw fail("\(name) cannot have conditional rules when allow-exec-after-start is false: the supervisor decides it")
                }
                // Compiled as a kill, which is SCMP_ACT_NOTIFY in supervised mode.
                plans[name] = Plan(number: Syscalls.number(of: name)!, plain: .killProcess)
            }
        }
        return plans.sorted { $0.key < $1.key }
    }

    func compile() throws(PolicyError) -> CompiledSeccompFilter {
        let plans = try plan()
        let defaultAct = scmpAction(policy.seccomp.defaultAction)
        guard let ctx = seccomp_init(defaultAct) else { throw fail("libseccomp: seccomp_init failed") }
        defer { seccomp_release(ctx) }

        func check(_ rc: Int32, _ what: @autoclosure () -> String) throws(PolicyError) {
            if rc < 0 { throw fail("libseccomp: \(what()) failed: \(String(cString: strerror(-rc)))") }
        }
        try check(seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, xsb_scmp_act_kill_process()), "setting the bad-architecture action")
        try check(seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0), "turning off no_new_privs")
        // A binary search over syscall numbers instead of a linear scan.
        try check(seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2), "turning on the binary-tree layout")

        var chains: [[BPFInstruction]] = []
        for (name, plan) in plans {
            let fallback = plan.plain.map(scmpAction) ?? defaultAct
            if plan.conditional.isEmpty {
                if fallback != defaultAct {
                    try check(seccomp_rule_add_array(ctx, fallback, plan.number, 0, nil), "adding the rule for \(name)")
                }
                continue
            }
            if !libseccompExpresses(plan) {
                do {
                    chains.append(try RuleChain.code(rules: plan.conditional, fallback: fallback, action: scmpAction))
                } catch {
                    throw fail("compiling the rules for \(name): \(error.message)")
                }
                try check(
                    seccomp_rule_add_array(ctx, RuleChain.placeholder(chains.count - 1), plan.number, 0, nil),
                    "adding the placeholder for the rules of \(name)")
                continue
            }
            let conditionalAct = scmpAction(plan.conditional[0].action)
            for rule in plan.conditional {
                var conds = rule.conditions.map(scmpCondition)
                try check(
                    seccomp_rule_add_array(ctx, conditionalAct, plan.number, UInt32(conds.count), &conds),
                    "adding a conditional rule for \(name)")
            }
            if fallback != defaultAct {
                // libseccomp drops conditional rules when the same syscall also has a rule without
                // conditions, so the fallback is a rule whose condition always holds; libseccomp
                // tests it after the specific ones.
                let index = UInt32(plan.conditional[0].conditions[0].index)
                var always = scmp_arg_cmp(arg: index, op: SCMP_CMP_GE, datum_a: 0, datum_b: 0)
                try check(seccomp_rule_add_array(ctx, fallback, plan.number, 1, &always), "adding the fallback rule for \(name)")
            }
        }

        let fd = xsb_memfd_create("extsandbox-seccomp", 1 /* MFD_CLOEXEC */)
        guard fd >= 0 else { throw fail("memfd_create failed: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        try check(seccomp_export_bpf(ctx, fd), "exporting the BPF program")
        let size = lseek(fd, 0, SEEK_END)
        guard size > 0, size % 8 == 0, lseek(fd, 0, SEEK_SET) == 0 else {
            throw fail("libseccomp exported an empty or malformed BPF program")
        }
        var bytes = [UInt8](repeating: 0, count: Int(size))
        guard bytes.withUnsafeMutableBytes({ readFully(fd, into: $0) }) == bytes.count else {
            throw fail("reading the exported BPF program failed")
        }
        do {
            bytes = try RuleChain.splice(bytes, chains: chains)
        } catch {
            throw fail("adding the rule chains: \(error.message)")
        }
        let policyFilter = CompiledSeccompFilter(program: bytes)
        try verify(policyFilter, plans: plans)
        let program: [UInt8]
        do {
            program = try BuiltinRefusals.apply(to: bytes)
        } catch {
            throw fail("adding the built-in refusals: \(error.message)")
        }
        let filter = CompiledSeccompFilter(program: program)
        try verifyBuiltins(filter, policyFilter: policyFilter, plans: plans)
        return filter
    }

    /// Checks the final program against the policy's own (already verified) program: it must
    /// answer exactly the same, except that the built-in refusals turn some calls the policy lets
    /// run into errors, and nothing else.
    func verifyBuiltins(_ compiled: CompiledSeccompFilter, policyFilter compiledPolicy: CompiledSeccompFilter, plans: [(String, Plan)]) throws(PolicyError) {
        let filter = BPFProgram(compiled), policyFilter = BPFProgram(compiledPolicy)
        let modes: [UInt64] = [0, 0o755, 0o4000, 0o2000, 0o6755, 0o4755, 0o1777, 0o177777,
                               0xdead_beef_0000_0000 | 0o4755, 0xffff_ffff_0000_0000 | 0o755, 0x1_0000_0000 | 0o2000,
                               0x1_0000_0000, 0xffff_ffff_ffff_ffff,
                               0o020644, 0o060644, 0o010644, 0o140755, 0o120000, 0x1_0000_0000 | 0o020000, 4, 5]
        // Every named call once (the rewrite must leave them alone), the built-ins' calls with
        // many argument values.
        var samples: [(Int32, [UInt64])] = plans.map { ($0.1.number, [UInt64](repeating: 0, count: 6)) }
        for nr in BuiltinRefusals.numbers {
            for index in 0...4 {
                for mode in modes {
                    var args = [UInt64](repeating: 0, count: 6)
                    args[index] = mode
                    samples.append((nr, args))
                }
            }
            for (op, arg1) in [(1, 0), (0, 0), (2, 0), (22, 2), (22, 1), (22, 0x1_0000_0001), (22, 0), (0x1_0000_0016, 2)] as [(UInt64, UInt64)] {
                samples.append((nr, [op, arg1, 0, 0, 0, 0]))
            }
        }
        for (_, plan) in plans {
            for rule in plan.conditional {
                guard let args = rule.conditions.satisfyingArguments() else { continue }
                samples.append((plan.number, args))
                for index in 0...4 {
                    for bits: UInt64 in [0o6000, 0o020000, 4] {  // set-id, a character device, RENAME_WHITEOUT
                        var refused = args
                        refused[index] |= bits
                        samples.append((plan.number, refused))
                    }
                }
            }
        }
        for (nr, args) in samples {
            let own = policyFilter.evaluate(syscall: nr, arguments: args)
            let want = BuiltinRefusals.combined(policy: own, syscall: nr, arguments: args)
            let got = filter.evaluate(syscall: nr, arguments: args)
            if got != want {
                throw fail("internal error: with the built-in refusals the filter gives syscall \(nr)(\(args.map { "0x" + String($0, radix: 16) }.joined(separator: ", "))) action 0x\(String(got, radix: 16)), expected 0x\(String(want, radix: 16))")
            }
        }
        if filter.evaluate(syscall: 39, arguments: [], architecture: SeccompReturn.archI386) != SeccompReturn.killProcess
            || filter.evaluate(syscall: SeccompReturn.x32SyscallBit | 39, arguments: []) != SeccompReturn.killProcess
            || filter.evaluate(syscall: SeccompReturn.x32SyscallBit | 90, arguments: [0, 0o4755]) != SeccompReturn.killProcess
        {
            throw fail("internal error: the compiled filter does not kill foreign-architecture system calls")
        }
    }

    /// Checks the program against the plan at many points (every rule matched, each of its
    /// conditions broken, rules overlapping, boundary values), so a surprise in how libseccomp
    /// merges rules, or in the rule chains, can never silently weaken a policy.
    func verify(_ compiled: CompiledSeccompFilter, plans: [(String, Plan)]) throws(PolicyError) {
        let filter = BPFProgram(compiled)
        for (name, plan) in plans {
            let fallback = plan.plain ?? policy.seccomp.defaultAction
            for args in Self.samples(plan.conditional) {
                let want = scmpAction(RulePrecedence.decide(plan.conditional, fallback: fallback, arguments: args))
                let got = filter.evaluate(syscall: plan.number, arguments: args)
                if got != want {
                    throw fail("internal error: the compiled filter gives \(name)(\(args.map { "0x" + String($0, radix: 16) }.joined(separator: ", "))) action 0x\(String(got, radix: 16)), expected 0x\(String(want, radix: 16))")
                }
            }
        }
        if filter.evaluate(syscall: 39, arguments: [], architecture: SeccompReturn.archI386) != SeccompReturn.killProcess
            || filter.evaluate(syscall: SeccompReturn.x32SyscallBit | 39, arguments: []) != SeccompReturn.killProcess
        {
            throw fail("internal error: the compiled filter does not kill foreign-architecture system calls")
        }
    }

    /// Rule count up to which `samples` crosses every rule with every other.
    static let fullCrossCheckLimit = 32

    /// Argument vectors that exercise `rules` (the conditional rules of one system call): all
    /// zeros, each rule matched, each rule with one condition broken, each pair of rules matched
    /// at once where they can be, and each compared value and its neighbours.
    ///
    /// Pairs and neighbours under other rules' matches are what catch a wrong order between
    /// overlapping rules, and they grow with the square of the rule count (400 rules on one
    /// call made 2.4 million samples, minutes of interpreting in a debug build). Up to
    /// `fullCrossCheckLimit` rules every pair is tried; beyond it only pairs whose actions differ
    /// (two rules with the same action give that action in either order), and neighbours only
    /// on the rule's own match and on zeros.
    static func samples(_ rules: [SyscallRule]) -> [[UInt64]] {
        let zero = [UInt64](repeating: 0, count: 6)
        var out: [[UInt64]] = [zero]
        var matched: [[UInt64]] = []
        for rule in rules {
            guard let args = rule.conditions.satisfyingArguments() else { continue }
            matched.append(args)
            for c in rule.conditions {
                guard let bad = c.violatingValue() else { continue }
                var broken = args
                broken[c.index] = bad
                out.append(broken)
            }
        }
        out += matched
        let crossAll = rules.count <= fullCrossCheckLimit
        for (i, a) in rules.enumerated() {
            guard let base = a.conditions.satisfyingArguments() else { continue }
            for b in rules[(i + 1)...] where crossAll || b.action != a.action {
                var both = base
                for c in b.conditions { if let v = c.satisfyingValue() { both[c.index] = v } }
                if a.conditions.allSatisfy({ $0.holds(for: both[$0.index]) }) && b.conditions.allSatisfy({ $0.holds(for: both[$0.index]) }) {
                    out.append(both)
                }
            }
        }
        for rule in rules {
            let bases = crossAll ? [zero] + matched : [zero] + (rule.conditions.satisfyingArguments().map { [$0] } ?? [])
            for c in rule.conditions {
                for v in [c.value, c.value &- 1, c.value &+ 1] {
                    for base in bases {
                        var args = base
                        args[c.index] = v
                        out.append(args)
                    }
                }
            }
        }
        return out
    }
}

extension ArgumentCondition {
    func holds(for arg: UInt64) -> Bool {
        switch op {
        case .equal: return arg == value
        case .notEqual: return arg != value
        case .less: return arg < value
        case .lessOrEqual: return arg <= value
        case .greater: return arg > value
        case .greaterOrEqual: return arg >= value
        case .maskedEqual(let mask): return arg & mask == value
        }
    }

    /// A value that satisfies this condition, if one exists.
    func satisfyingValue() -> UInt64? {
        switch op {
        case .equal, .lessOrEqual, .greaterOrEqual, .maskedEqual: return value
        case .notEqual: return value == 0 ? 1 : 0
        case .less: return value == 0 ? nil : value - 1
        case .greater: return value == .max ? nil : value + 1
        }
    }

    /// A value that violates this condition, if one exists.
    func violatingValue() -> UInt64? {
        switch op {
        case .equal: return value == 0 ? 1 : 0
        case .notEqual: return value
        case .less: return value
        case .lessOrEqual: return value == .max ? nil : value + 1
        case .greater: return value
        case .greaterOrEqual: return value == 0 ? nil : value - 1
        case .maskedEqual(let mask):
            if mask == 0 { return nil }
            // Flip the lowest bit of the mask.
            return value ^ (mask & (~mask &+ 1))
        }
    }
}

extension Array where Element == ArgumentCondition {
    /// Six arguments that satisfy every condition (conditions are on distinct arguments).
    func satisfyingArguments() -> [UInt64]? {
        var args = [UInt64](repeating: 0, count: 6)
        for c in self {
            guard let v = c.satisfyingValue() else { return nil }
            args[c.index] = v
        }
        return allSatisfy { $0.holds(for: args[$0.index]) } ? args : nil
    }
}
