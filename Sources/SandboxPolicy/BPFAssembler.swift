/// Why a BPF program could not be assembled or rewritten (an internal error: the compiler's
/// own code generation failed, never the policy's content).
struct BPFRewriteFailure: Error {
    var message: String
}

/// One classic BPF instruction (struct sock_filter).
struct BPFInstruction: Equatable {
    var code: UInt16
    var jt: UInt8
    var jf: UInt8
    var k: UInt32

    static let ldAbsW: UInt16 = 0x20  // BPF_LD | BPF_W | BPF_ABS
    static let andK: UInt16 = 0x54  // BPF_ALU | BPF_AND | BPF_K
    static let ja: UInt16 = 0x05  // BPF_JMP | BPF_JA
    static let jeqK: UInt16 = 0x15  // BPF_JMP | BPF_JEQ | BPF_K
    static let jgtK: UInt16 = 0x25  // BPF_JMP | BPF_JGT | BPF_K
    static let jgeK: UInt16 = 0x35  // BPF_JMP | BPF_JGE | BPF_K
    static let jsetK: UInt16 = 0x45  // BPF_JMP | BPF_JSET | BPF_K
    static let retK: UInt16 = 0x06  // BPF_RET | BPF_K
    static let retA: UInt16 = 0x16  // BPF_RET | BPF_A

    init(code: UInt16, jt: UInt8, jf: UInt8, k: UInt32) {
        self.code = code
        self.jt = jt
        self.jf = jf
        self.k = k
    }

    init(bytes: [UInt8], at o: Int) {
        code = UInt16(bytes[o]) | UInt16(bytes[o + 1]) << 8
        jt = bytes[o + 2]
        jf = bytes[o + 3]
        k = (0..<4).reduce(0) { $0 | UInt32(bytes[o + 4 + $1]) << (8 * UInt32($1)) }
    }

    var bytes: [UInt8] {
        [UInt8(code & 0xff), UInt8(code >> 8), jt, jf] + (0..<4).map { UInt8(truncatingIfNeeded: k >> (8 * UInt32($0))) }
    }

    /// The instructions of a program (struct sock_filter[]).
    static func decode(_ program: [UInt8]) throws(BPFRewriteFailure) -> [BPFInstruction] {
        guard program.count % 8 == 0, !program.isEmpty else { throw BPFRewriteFailure(message: "malformed BPF program") }
        return stride(from: 0, to: program.count, by: 8).map { BPFInstruction(bytes: program, at: $0) }
    }
}

/// A tiny assembler for forward-only classic BPF with named labels.
struct BPFAssembler {
    private enum Item {
        case insn(BPFInstruction, jt: String?, jf: String?)
        /// `ja` to a label: 32-bit offset, so it can reach any later instruction.
        case jump(String)
        case label(String)
    }
    private var items: [Item] = []

    mutating func label(_ name: String) { items.append(.label(name)) }
    mutating func loadAbsolute(_ offset: UInt32) {
        items.append(.insn(.init(code: BPFInstruction.ldAbsW, jt: 0, jf: 0, k: offset), jt: nil, jf: nil))
    }
    /// `A &= value`.
    mutating func and(_ value: UInt32) {
        items.append(.insn(.init(code: BPFInstruction.andK, jt: 0, jf: 0, k: value), jt: nil, jf: nil))
    }
    /// `else: nil` falls through to the next instruction (as does `then: nil`).
    mutating func jumpIfEqual(_ value: UInt32, then: String?, else other: String?) {
        items.append(.insn(.init(code: BPFInstruction.jeqK, jt: 0, jf: 0, k: value), jt: then, jf: other))
    }
    /// Unsigned `A > value`.
    mutating func jumpIfGreater(_ value: UInt32, then: String?, else other: String?) {
        items.append(.insn(.init(code: BPFInstruction.jgtK, jt: 0, jf: 0, k: value), jt: then, jf: other))
    }
    /// Unsigned `A >= value`.
    mutating func jumpIfGreaterOrEqual(_ value: UInt32, then: String?, else other: String?) {
        items.append(.insn(.init(code: BPFInstruction.jgeK, jt: 0, jf: 0, k: value), jt: then, jf: other))
    }
    mutating func jumpIfAnySet(_ bits: UInt32, then: String?, else other: String?) {
        items.append(.insn(.init(code: BPFInstruction.jsetK, jt: 0, jf: 0, k: bits), jt: then, jf: other))
    }
    mutating func jump(to label: String) { items.append(.jump(label)) }
    mutating func ret(_ value: UInt32) {
        items.append(.insn(.init(code: BPFInstruction.retK, jt: 0, jf: 0, k: value), jt: nil, jf: nil))
    }

    func assemble() throws(BPFRewriteFailure) -> [BPFInstruction] {
        var position: [String: Int] = [:]
        var count = 0
        for item in items {
            switch item {
            case .label(let name): position[name] = count
            case .insn, .jump: count += 1
            }
        }
        var out: [BPFInstruction] = []
        for item in items {
            let pc = out.count
            func target(_ label: String) throws(BPFRewriteFailure) -> Int {
                guard let target = position[label], target > pc else {
                    throw BPFRewriteFailure(message: "internal error: bad jump to \(label) in generated BPF")
                }
                return target - pc - 1
            }
            func offset(_ label: String?) throws(BPFRewriteFailure) -> UInt8 {
                guard let label else { return 0 }
                let distance = try target(label)
                guard distance <= 255 else {
                    throw BPFRewriteFailure(message: "internal error: conditional jump to \(label) is too far in generated BPF")
                }
                return UInt8(distance)
            }
            switch item {
            case .label: continue
            case .jump(let label):
                out.append(BPFInstruction(code: BPFInstruction.ja, jt: 0, jf: 0, k: UInt32(try target(label))))
            case .insn(var insn, let jt, let jf):
                insn.jt = try offset(jt)
                insn.jf = try offset(jf)
                out.append(insn)
            }
        }
        return out
    }
}
