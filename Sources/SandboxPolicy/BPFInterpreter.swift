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
        // struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6];
        var data = [UInt8](repeating: 0, count: 64)
        func put32(_ v: UInt32, at offset: Int) {
            for i in 0..<4 { data[offset + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt32(i))) }
        }
        func put64(_ v: UInt64, at offset: Int) {
            put32(UInt32(truncatingIfNeeded: v), at: offset)
            put32(UInt32(truncatingIfNeeded: v >> 32), at: offset + 4)
        }
        put32(UInt32(bitPattern: syscall), at: 0)
        put32(architecture, at: 4)
        put64(instructionPointer, at: 8)
        for (i, a) in arguments.prefix(6).enumerated() { put64(a, at: 16 + 8 * i) }

        let bytes = program
        func u16(_ o: Int) -> UInt16 { UInt16(bytes[o]) | UInt16(bytes[o + 1]) << 8 }
        func u32(_ o: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(bytes[o + $1]) << (8 * UInt32($1)) } }
        func load32(_ offset: UInt32) -> UInt32? {
            let o = Int(offset)
            guard o + 4 <= data.count else { return nil }
            return (0..<4).reduce(0) { $0 | UInt32(data[o + $1]) << (8 * UInt32($1)) }
        }

        var a: UInt32 = 0, x: UInt32 = 0
        var mem = [UInt32](repeating: 0, count: 16)
        var pc = 0
        let count = bytes.count / 8
        var steps = 0
        while pc < count, steps < 100_000 {
            steps += 1
            let base = pc * 8
            let code = u16(base)
            let jt = Int(bytes[base + 2]), jf = Int(bytes[base + 3])
            let k = u32(base + 4)
            pc += 1
            let cls = code & 0x07
            switch cls {
            case 0x00, 0x01:  // BPF_LD, BPF_LDX
                let mode = code & 0xe0
                var v: UInt32
                switch mode {
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
                pc += taken ? jt : jf
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
