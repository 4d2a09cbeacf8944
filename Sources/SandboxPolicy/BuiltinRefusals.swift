/// Refusals that every compiled filter carries, whatever the policy says: they apply wherever the
/// policy would let the call run (`allow` or `log`), and never weaken a `kill` or an `errno`.
///
/// - Setuid and setgid bits can never be set from inside: a file with them, left in a writable
///   bind, would give anyone on the host who runs it the sandbox caller's identity. Every call that
///   takes a file mode (`chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `open`, `openat`, `creat`,
///   `mkdir`, `mkdirat`, `mknod`, `mknodat`) fails with `EPERM` when the mode has `S_ISUID` or
///   `S_ISGID`. Only the low 32 bits of the mode argument are tested: the kernel reads the mode as
///   a `umode_t`, so garbage in the upper half of the register changes nothing.
/// - No device nodes, and so no whiteouts: `mknod` and `mknodat` with a character or block device
///   type (`S_IFCHR`, `S_IFBLK`) and `renameat2` with `RENAME_WHITEOUT` fail with `EPERM`. The
///   kernel lets anyone create the 0:0 character device that overlayfs (and tar, rsync) take for
///   a whiteout, and a file system the sandbox writes to may be a layer of one on the host; every
///   other device node needs a capability the sandbox never has, so nothing that worked is lost.
/// - `openat2` fails with `ENOSYS`: its mode is in memory, which seccomp cannot read. The C library
///   and programs fall back to `openat`.
/// - No nested filters: `seccomp(SECCOMP_SET_MODE_FILTER, …)` and `prctl(PR_SET_SECCOMP, mode)`
///   for any mode but `SECCOMP_MODE_STRICT` fail with `EPERM`. A filter the program stacks on
///   ours could answer a call with an errno before our user notification ("kill") is seen, since
///   the kernel takes the most restrictive of all filters' answers and an errno outranks a
///   notification.
///
/// They are compiled as an epilogue: every return of `allow` or `log` in libseccomp's program
/// becomes a jump to a small block that tests these calls and either refuses or returns the
/// original action. So the built-ins only ever turn "the call runs" into "the call fails".
package enum BuiltinRefusals {
    /// A system call whose argument `index` is a file mode.
    package struct ModeArgument: Sendable {
        package var syscall: String
        /// The x86_64 number (fixed ABI; some libseccomp versions do not know `fchmodat2`).
        package var number: Int32
        package var index: Int
        /// The mode also carries the file type (`mknod`, `mknodat`): device types are refused.
        package var hasFileType = false
    }

    /// `S_ISUID | S_ISGID`.
    static let setIDBits: UInt32 = 0o6000

    package static let modeArguments: [ModeArgument] = [
        .init(syscall: "open", number: 2, index: 2),
        .init(syscall: "mkdir", number: 83, index: 1),
        .init(syscall: "creat", number: 85, index: 1),
        .init(syscall: "chmod", number: 90, index: 1),
        .init(syscall: "fchmod", number: 91, index: 1),
        .init(syscall: "mknod", number: 133, index: 1, hasFileType: true),
        .init(syscall: "openat", number: 257, index: 3),
        .init(syscall: "mkdirat", number: 258, index: 2),
        .init(syscall: "mknodat", number: 259, index: 2, hasFileType: true),
        .init(syscall: "fchmodat", number: 268, index: 2),
        .init(syscall: "fchmodat2", number: 452, index: 2),
    ]

    /// `S_IFMT` and the device types in it (`S_IFCHR`, `S_IFBLK`).
    static let fileTypeMask: UInt32 = 0o170000
    static let deviceTypes: [UInt32] = [0o020000, 0o060000]
    static let renameat2Number: Int32 = 316
    /// `renameat2`'s flags (an unsigned int).
    static let renameFlagsIndex = 4
    static let renameWhiteout: UInt32 = 1 << 2  // RENAME_WHITEOUT

    /// Every call a built-in may refuse (the compiler's self-check samples them all).
    static var numbers: [Int32] {
        modeArguments.map(\.number) + [renameat2Number, openat2Number, seccompNumber, prctlNumber]
    }

    static let openat2Number: Int32 = 437
    static let seccompNumber: Int32 = 317
    static let prctlNumber: Int32 = 157
    static let seccompSetModeFilter: UInt32 = 1  // SECCOMP_SET_MODE_FILTER
    static let prSetSeccomp: UInt32 = 22  // PR_SET_SECCOMP
    static let seccompModeStrict: UInt64 = 1  // SECCOMP_MODE_STRICT

    static let eperm = SeccompReturn.errno | 1
    static let enosys = SeccompReturn.errno | 38

    /// Why each built-in exists, for messages, `policy show` and the docs.
    static let setIDExplanation =
        "setuid and setgid bits can never be set from inside: a file with them in a writable bind would run with the sandbox caller's identity for anyone on the host"
    static let deviceNodeExplanation =
        "no device node can be made from inside: the 0:0 character device that anyone may create is a whiteout to overlayfs, tar and rsync on the host, and every other device needs a capability the sandbox lacks"
    static let openat2Explanation =
        "openat2 passes its mode in memory, which seccomp cannot read, so it always fails with ENOSYS (the C library and programs fall back to openat)"
    static let nestedFilterExplanation =
        "a program may not stack its own seccomp filter: one that answers with an errno would outrank the sandbox's kill"

    /// The built-ins' answer for one native call, or `nil` when they leave it to the policy.
    /// Mirrors the BPF epilogue, for the compiler's self-check and for tests.
    static func refusal(syscall nr: Int32, arguments: [UInt64]) -> UInt32? {
        func arg(_ i: Int) -> UInt64 { i < arguments.count ? arguments[i] : 0 }
        func low(_ i: Int) -> UInt32 { UInt32(truncatingIfNeeded: arg(i)) }
        if let m = modeArguments.first(where: { $0.number == nr }) {
            let mode = low(m.index)
            if mode & setIDBits != 0 { return eperm }
            return m.hasFileType && deviceTypes.contains(mode & fileTypeMask) ? eperm : nil
        }
        switch nr {
        case renameat2Number: return low(renameFlagsIndex) & renameWhiteout != 0 ? eperm : nil
        case openat2Number: return enosys
        case seccompNumber: return low(0) == seccompSetModeFilter ? eperm : nil
        case prctlNumber: return low(0) == prSetSeccomp && arg(1) != seccompModeStrict ? eperm : nil
        default: return nil
        }
    }

    /// Whether a filter answer lets the call run (so the built-ins may refuse it instead).
    static func runs(_ ret: UInt32) -> Bool {
        let action = ret & SeccompReturn.actionMask
        return action == SeccompReturn.allow || action == SeccompReturn.log
    }

    /// What the final filter must answer, given the policy's own answer.
    static func combined(policy ret: UInt32, syscall nr: Int32, arguments: [UInt64]) -> UInt32 {
        guard runs(ret), let refusal = refusal(syscall: nr, arguments: arguments) else { return ret }
        return refusal
    }

    /// Why a rule that lets `syscall` run under `conditions` can never take effect (every call it
    /// matches is refused by a built-in), or `nil`.
    static func ineffectiveRule(syscall: String, action: SyscallAction, conditions: [ArgumentCondition]) -> String? {
        guard action == .allow || action == .log else { return nil }
        if syscall == "openat2" { return openat2Explanation }
        if syscall == "renameat2" {
            for c in conditions where c.index == renameFlagsIndex {
                if let (bits, _) = forcedBits(c), bits & renameWhiteout != 0 {
                    return "every call this rule matches has RENAME_WHITEOUT in arg\(renameFlagsIndex), and \(deviceNodeExplanation), so renameat2 fails with EPERM"
                }
            }
            return nil
        }
        guard let m = modeArguments.first(where: { $0.syscall == syscall }) else { return nil }
        for c in conditions where c.index == m.index {
            guard let (bits, mask) = forcedBits(c) else { continue }
            if bits & setIDBits != 0 {
                return "every call this rule matches has S_ISUID or S_ISGID in arg\(m.index), and \(setIDExplanation), so \(syscall) fails with EPERM"
            }
            if m.hasFileType, mask & fileTypeMask == fileTypeMask, deviceTypes.contains(bits & fileTypeMask) {
                return "every call this rule matches makes a device node (S_IFCHR or S_IFBLK in arg\(m.index)), and \(deviceNodeExplanation), so \(syscall) fails with EPERM"
            }
        }
        return nil
    }

    /// The low 32 bits a condition forces to be set, and which bits it decides at all.
    private static func forcedBits(_ c: ArgumentCondition) -> (bits: UInt32, mask: UInt32)? {
        switch c.op {
        case .equal: return (UInt32(truncatingIfNeeded: c.value), .max)
        case .maskedEqual(let mask): return (UInt32(truncatingIfNeeded: mask & c.value), UInt32(truncatingIfNeeded: mask))
        default: return nil
        }
    }

    /// Rewrites libseccomp's program: each `ret ALLOW`/`ret LOG` becomes a jump into an epilogue
    /// that applies the built-ins and then returns that same action.
    static func apply(to program: [UInt8]) throws(BPFRewriteFailure) -> [UInt8] {
        var insns = try BPFInstruction.decode(program)
        // Every distinct "runs" return value gets one epilogue, appended in order of appearance.
        var epilogueStart: [UInt32: Int] = [:]
        var epilogues: [BPFInstruction] = []
        var retargets: [(index: Int, value: UInt32)] = []
        for (i, insn) in insns.enumerated() {
            switch insn.code {
            case BPFInstruction.retK:
                guard runs(insn.k) else { continue }
                if epilogueStart[insn.k] == nil {
                    epilogueStart[insn.k] = insns.count + epilogues.count
                    epilogues += try epilogue(returning: insn.k)
                }
                retargets.append((i, insn.k))
            case BPFInstruction.retA:
                throw BPFRewriteFailure(message: "the BPF program returns a computed value, which the built-in refusals cannot follow")
            default:
                continue
            }
        }
        for (index, value) in retargets {
            let target = epilogueStart[value]!
            insns[index] = BPFInstruction(code: BPFInstruction.ja, jt: 0, jf: 0, k: UInt32(target - index - 1))
        }
        // The kernel takes at most 4096 instructions; a longer program fails the launch at the
        // seccomp step (it never runs without its filter).
        insns += epilogues
        return insns.flatMap(\.bytes)
    }

    /// The block that applies the built-ins and otherwise returns `ret`.
    static func epilogue(returning ret: UInt32) throws(BPFRewriteFailure) -> [BPFInstruction] {
        var asm = BPFAssembler()
        asm.loadAbsolute(4)  // seccomp_data.arch
        asm.jumpIfEqual(SeccompReturn.archX86_64, then: "native", else: "return")
        asm.label("native")
        asm.loadAbsolute(0)  // seccomp_data.nr
        for m in modeArguments {
            asm.jumpIfEqual(UInt32(m.number), then: (m.hasFileType ? "node" : "mode") + "\(m.index)", else: nil)
        }
        asm.jumpIfEqual(UInt32(renameat2Number), then: "rename", else: nil)
        asm.jumpIfEqual(UInt32(openat2Number), then: "enosys", else: nil)
        asm.jumpIfEqual(UInt32(seccompNumber), then: "seccomp", else: nil)
        asm.jumpIfEqual(UInt32(prctlNumber), then: "prctl", else: nil)
        asm.ret(ret)
        // The low word of args[i] (little endian): the kernel reads the mode as a umode_t.
        for index in Set(modeArguments.map(\.index)).sorted() {
            asm.label("mode\(index)")
            asm.loadAbsolute(UInt32(16 + 8 * index))
            asm.jumpIfAnySet(setIDBits, then: "eperm", else: "return")
        }
        // mknod's mode: set-id bits, then the file type.
        for index in Set(modeArguments.filter(\.hasFileType).map(\.index)).sorted() {
            asm.label("node\(index)")
            asm.loadAbsolute(UInt32(16 + 8 * index))
            asm.jumpIfAnySet(setIDBits, then: "eperm", else: nil)
            asm.and(fileTypeMask)
            for type in deviceTypes { asm.jumpIfEqual(type, then: "eperm", else: nil) }
            asm.jump(to: "return")
        }
        asm.label("rename")
        asm.loadAbsolute(UInt32(16 + 8 * renameFlagsIndex))  // flags (unsigned int)
        asm.jumpIfAnySet(renameWhiteout, then: "eperm", else: "return")
        asm.label("seccomp")
        asm.loadAbsolute(16)  // operation (unsigned int)
        asm.jumpIfEqual(seccompSetModeFilter, then: "eperm", else: "return")
        asm.label("prctl")
        asm.loadAbsolute(16)  // option (int)
        asm.jumpIfEqual(prSetSeccomp, then: "prctl-mode", else: "return")
        asm.label("prctl-mode")
        asm.loadAbsolute(24)  // arg2 (unsigned long), low word
        asm.jumpIfEqual(UInt32(seccompModeStrict), then: "prctl-mode-high", else: "eperm")
        asm.label("prctl-mode-high")
        asm.loadAbsolute(28)  // arg2, high word
        asm.jumpIfEqual(0, then: "return", else: "eperm")
        asm.label("return")
        asm.ret(ret)
        asm.label("eperm")
        asm.ret(eperm)
        asm.label("enosys")
        asm.ret(enosys)
        return try asm.assemble()
    }
}
