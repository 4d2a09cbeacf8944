/// The conditional rules of a system call that libseccomp's own rules cannot express — rules
/// with several different actions, or whose action is the filter's default — compiled by
/// extsandbox as one chain of BPF that tries them in ``RulePrecedence`` order.
///
/// libseccomp merges all rules of a system call into one decision tree and guarantees no order
/// between overlapping rules with different actions (its manual: "all of the filter rules … are
/// combined into a union"), so a policy's precedence cannot be left to it. Instead the compiler
/// gives each such system call a placeholder rule (`SCMP_ACT_TRACE` with the chain's number,
/// an action no policy produces), lets libseccomp build its usual binary tree over the syscall
/// numbers, and then replaces each placeholder return with a jump to the chain, appended after
/// libseccomp's program. The chain is reached only for the native architecture and the exact
/// syscall number, as libseccomp dispatched it.
enum RuleChain {
    /// The placeholder action for chain `index`.
    static func placeholder(_ index: Int) -> UInt32 { SeccompReturn.trace | UInt32(index) }

    /// The BPF for `rules` (conditional rules of one system call, in precedence order): the
    /// first rule whose conditions all hold returns its action, no match returns `fallback`.
    static func code(
        rules: [SyscallRule], fallback: UInt32, action: (SyscallAction) -> UInt32
    ) throws(BPFRewriteFailure) -> [BPFInstruction] {
        var asm = BPFAssembler()
        for (i, rule) in rules.enumerated() {
            asm.label("rule\(i)")
            for (j, condition) in rule.conditions.enumerated() {
                emit(condition, into: &asm, fail: "rule\(i + 1)", pass: "rule\(i)-condition\(j)-holds")
            }
            asm.ret(action(rule.action))
        }
        asm.label("rule\(rules.count)")
        asm.ret(fallback)
        return try asm.assemble()
    }

    /// Tests one 64-bit comparison as two 32-bit words (seccomp_data.args[i]: low word at
    /// 16 + 8i, high word after it, little endian): falls through to `pass` when it holds,
    /// jumps to `fail` when it does not.
    static func emit(_ c: ArgumentCondition, into asm: inout BPFAssembler, fail: String, pass: String) {
        let low = UInt32(16 + 8 * c.index), high = low + 4
        let vh = UInt32(truncatingIfNeeded: c.value >> 32), vl = UInt32(truncatingIfNeeded: c.value)
        asm.loadAbsolute(high)
        switch c.op {
        case .equal:
            asm.jumpIfEqual(vh, then: nil, else: fail)
            asm.loadAbsolute(low)
            asm.jumpIfEqual(vl, then: nil, else: fail)
        case .notEqual:
            asm.jumpIfEqual(vh, then: nil, else: pass)
            asm.loadAbsolute(low)
            asm.jumpIfEqual(vl, then: fail, else: nil)
        case .greater, .greaterOrEqual, .less, .lessOrEqual:
            // One unsigned test, "A > v" or "A >= v"; "<" and "<=" are its negations (not >=,
            // not >), so they take the same test with its exits swapped.
            let upward = c.op == .greater || c.op == .greaterOrEqual
            let strict = c.op == .greater || c.op == .lessOrEqual
            let (above, below) = upward ? (pass, fail) : (fail, pass)
            asm.jumpIfGreater(vh, then: above, else: nil)
            asm.jumpIfEqual(vh, then: nil, else: below)
            asm.loadAbsolute(low)
            if strict {
                asm.jumpIfGreater(vl, then: above, else: below)
            } else {
                asm.jumpIfGreaterOrEqual(vl, then: above, else: below)
            }
        case .maskedEqual(let mask):
            asm.and(UInt32(truncatingIfNeeded: mask >> 32))
            asm.jumpIfEqual(vh, then: nil, else: fail)
            asm.loadAbsolute(low)
            asm.and(UInt32(truncatingIfNeeded: mask))
            asm.jumpIfEqual(vl, then: nil, else: fail)
        }
        asm.label(pass)
    }

    /// Replaces every placeholder return in libseccomp's `program` with a jump to its chain, and
    /// appends the chains. Fails if a placeholder has no chain or a chain is never reached.
    static func splice(_ program: [UInt8], chains: [[BPFInstruction]]) throws(BPFRewriteFailure) -> [UInt8] {
        if chains.isEmpty { return program }
        var insns = try BPFInstruction.decode(program)
        var start: [Int] = []
        var appended: [BPFInstruction] = []
        for chain in chains {
            start.append(insns.count + appended.count)
            appended += chain
        }
        var reached = Set<Int>()
        for (i, insn) in insns.enumerated()
        where insn.code == BPFInstruction.retK && insn.k & SeccompReturn.actionMask == SeccompReturn.trace {
            let index = Int(insn.k & SeccompReturn.dataMask)
            guard index < chains.count else {
                throw BPFRewriteFailure(message: "internal error: libseccomp's program returns an unknown placeholder 0x\(String(insn.k, radix: 16))")
            }
            insns[i] = BPFInstruction(code: BPFInstruction.ja, jt: 0, jf: 0, k: UInt32(start[index] - i - 1))
            reached.insert(index)
        }
        guard reached.count == chains.count else {
            throw BPFRewriteFailure(message: "internal error: libseccomp's program never reaches \(chains.count - reached.count) of the rule chains")
        }
        return (insns + appended).flatMap(\.bytes)
    }
}
