extension CompiledSeccompFilter {
    /// Runs the program on one system call, as the kernel would, and returns the raw
    /// `SECCOMP_RET_*` value (see ``SeccompReturn``). For tests and `policy` tools.
    ///
    /// - Parameters:
    ///   - syscall: the syscall number (for x32, with ``SeccompReturn/x32SyscallBit`` set).
    ///   - arguments: up to six arguments; missing ones are 0.
    ///   - architecture: the `AUDIT_ARCH_*` value; x86_64 by default.
    public func evaluate(
        syscall: Int32, arguments: [UInt64], architecture: UInt32 = SeccompReturn.archX86_64,
        instructionPointer: UInt64 = 0
    ) -> UInt32 {
        BPFProgram(self).evaluate(syscall: syscall, arguments: arguments, architecture: architecture,
                                  instructionPointer: instructionPointer)
    }
}

/// A seccomp BPF program decoded once, to be run on many system calls: the compiler's
/// self-check runs thousands of samples through programs of thousands of instructions, and
/// decoding the bytes on every step made that minutes long in a debug build.
struct BPFProgram {
    struct Instruction {
        let code: UInt16
        let jt: UInt8
        let jf: UInt8
        let k: UInt32
    }

    let instructions: [Instruction]

    init(_ filter: CompiledSeccompFilter) {
        let bytes = filter.program
        func word(at o: Int) -> UInt32 {
            var value: UInt32 = 0
            for i in (0..<4).reversed() { value = value << 8 | UInt32(bytes[o + i]) }
            return value
        }
        instructions = stride(from: 0, to: bytes.count - bytes.count % 8, by: 8).map { (o: Int) -> Instruction in
            let code = UInt16(bytes[o]) | UInt16(bytes[o + 1]) << 8
            return Instruction(code: code, jt: bytes[o + 2], jf: bytes[o + 3], k: word(at: o + 4))
        }
    }

    /// See ``CompiledSeccompFilter/evaluate(syscall:arguments:architecture:instructionPointer:)``.
    func evaluate(syscall: Int32, arguments: [UInt64], architecture: UInt32 = SeccompReturn.archX86_64,
                  instructionPointer: UInt64 = 0) -> UInt32 {
        // struct seccomp_data as 16 little-endian words: int nr; __u32 arch;
        // __u64 instruction_pointer; __u64 args[6].
        var words = [UInt32](repeating: 0, count: 16)
        words[0] = UInt32(bitPattern: syscall)
        words[1] = architecture
        words[2] = UInt32(truncatingIfNeeded: instructionPointer)
        words[3] = UInt32(truncatingIfNeeded: instructionPointer >> 32)
        for (i, argument) in arguments.prefix(6).enumerated() {
            words[4 + 2 * i] = UInt32(truncatingIfNeeded: argument)
            words[5 + 2 * i] = UInt32(truncatingIfNeeded: argument >> 32)
        }
        // The kernel's checker refuses loads that are unaligned or past the end; so do we.
        func load32(_ offset: UInt32) -> UInt32? {
            guard offset % 4 == 0, offset < 64 else { return nil }
            return words[Int(offset / 4)]
        }

        var a: UInt32 = 0, x: UInt32 = 0
        var mem = [UInt32](repeating: 0, count: 16)
        var pc = 0
        var steps = 0
        while pc < instructions.count, steps < 100_000 {
            steps += 1
            let instruction = instructions[pc]
            let code = instruction.code, k = instruction.k
            pc += 1
            let cls = code & 0x07
            switch cls {
            case 0x00, 0x01:  // BPF_LD, BPF_LDX
                var v: UInt32
                switch code & 0xe0 {
                case 0x00: v = k  // IMM
                case 0x20: guard let l = load32(k) else { return SeccompReturn.killThread }; v = l  // ABS
                case 0x60: guard k < 16 else { return SeccompReturn.killThread }; v = mem[Int(k)]  // MEM
                case 0x80: v = 64  // LEN
                default: return SeccompReturn.killThread
                }
                if cls == 0x00 { a = v } else { x = v }
            case 0x02: guard k < 16 else { return SeccompReturn.killThread }; mem[Int(k)] = a  // ST
            case 0x03: guard k < 16 else { return SeccompReturn.killThread }; mem[Int(k)] = x  // STX
            case 0x04:  // ALU
                let operand = (code & 0x08) != 0 ? x : k
                switch code & 0xf0 {
                case 0x00: a = a &+ operand
                case 0x10: a = a &- operand
                case 0x20: a = a &* operand
                case 0x30: guard operand != 0 else { return SeccompReturn.killThread }; a /= operand
                case 0x40: a |= operand
                case 0x50: a &= operand
                case 0x60: a = operand >= 32 ? 0 : a << operand
                case 0x70: a = operand >= 32 ? 0 : a >> operand
                case 0x80: a = 0 &- a
                case 0x90: guard operand != 0 else { return SeccompReturn.killThread }; a %= operand
                case 0xa0: a ^= operand
                default: return SeccompReturn.killThread
                }
            case 0x05:  // JMP
                let operand = (code & 0x08) != 0 ? x : k
                let taken: Bool
                switch code & 0xf0 {
                case 0x00: pc += Int(k); continue  // JA
                case 0x10: taken = a == operand
                case 0x20: taken = a > operand
                case 0x30: taken = a >= operand
                case 0x40: taken = (a & operand) != 0
                default: return SeccompReturn.killThread
                }
                pc += Int(taken ? instruction.jt : instruction.jf)
            case 0x06:  // RET
                return (code & 0x18) == 0x10 ? a : k
            case 0x07:  // MISC
                if (code & 0xf8) == 0x00 { x = a } else { a = x }
            default:
                return SeccompReturn.killThread
            }
        }
        return SeccompReturn.killThread
    }
}
