/// Parses one argument condition: `arg1 == TIOCSTI`, `arg0 & (CLONE_NEWNS|CLONE_NEWUSER) == 0`,
/// `arg2 <= 0x1000`.
///
///     condition := ARG [ "&" value ] OP value
///     ARG       := "arg0" … "arg5"
///     OP        := "==" | "!=" | "<" | "<=" | ">" | ">="   (only "==" after a mask)
///     value     := term { "|" term }
///     term      := NUMBER | CONSTANT | "(" value ")"
///     NUMBER    := decimal | 0x hexadecimal
struct ConditionParser {
    struct Failure: Error {
        var offset: Int
        var message: String
    }

    private enum Token: Equatable {
        case word(String)   // identifiers and numbers
        case op(String)     // == != < <= > >= & | ( )
        case end
    }

    private let tokens: [(token: Token, offset: Int)]
    private var index = 0

    init(_ text: String) throws(Failure) {
        var out: [(Token, Int)] = []
        let chars = Array(text)
        var i = 0
        while i < chars.count {
            let c = chars[i]
            if c == " " || c == "\t" { i += 1; continue }
            if c.isLetter || c.isNumber || c == "_" {
                let start = i
                while i < chars.count, chars[i].isLetter || chars[i].isNumber || chars[i] == "_" { i += 1 }
                out.append((.word(String(chars[start..<i])), start))
                continue
            }
            let two = i + 1 < chars.count ? String(chars[i...i + 1]) : ""
            if ["==", "!=", "<=", ">="].contains(two) {
                out.append((.op(two), i)); i += 2; continue
            }
            if "<>&|()".contains(c) {
                out.append((.op(String(c)), i)); i += 1; continue
            }
            if c == "=" {
                throw Failure(offset: i, message: "use \"==\" to compare, not \"=\"")
            }
            throw Failure(offset: i, message: "unexpected character \"\(c)\" in condition")
        }
        out.append((.end, chars.count))
        tokens = out
    }

    static func parse(_ text: String) throws(Failure) -> ArgumentCondition {
        var parser = try ConditionParser(text)
        return try parser.condition()
    }

    private var current: (token: Token, offset: Int) { tokens[index] }

    private mutating func condition() throws(Failure) -> ArgumentCondition {
        guard case .word(let argWord) = current.token else {
            throw Failure(offset: current.offset, message: "a condition starts with the argument it tests, arg0 to arg5 (for example \"arg1 == TIOCSTI\")")
        }
        let argOffset = current.offset
        guard argWord.hasPrefix("arg"), let n = Int(argWord.dropFirst(3)), argWord.count > 3 else {
            throw Failure(offset: argOffset, message: "a condition starts with the argument it tests, arg0 to arg5, not \"\(argWord)\"")
        }
        guard (0...5).contains(n) else {
            throw Failure(offset: argOffset, message: "bad argument index \"\(argWord)\": system calls have arguments arg0 to arg5")
        }
        index += 1
        var mask: UInt64?
        if current.token == .op("&") {
            index += 1
            mask = try value()
        }
        guard case .op(let opText) = current.token, ["==", "!=", "<", "<=", ">", ">="].contains(opText) else {
            throw Failure(offset: current.offset, message: "expected a comparison (==, !=, <, <=, >, >=) after \"\(argWord)\(mask == nil ? "" : " & …")\"")
        }
        let opOffset = current.offset
        index += 1
        let valueOffset = current.offset
        let rhs = try value()
        guard current.token == .end else {
            throw Failure(offset: current.offset, message: "unexpected text after the condition")
        }
        let op: ArgumentCondition.Operator
        if let mask {
            guard opText == "==" else {
                throw Failure(offset: opOffset, message: "a masked comparison (arg & MASK) only supports \"==\": seccomp cannot test (arg & MASK) \(opText) VALUE")
            }
            guard rhs & ~mask == 0 else {
                throw Failure(offset: valueOffset, message: "the value has bits outside the mask, so the condition can never hold")
            }
            op = .maskedEqual(mask: mask)
        } else {
            switch opText {
            case "==": op = .equal
            case "!=": op = .notEqual
            case "<": op = .less
            case "<=": op = .lessOrEqual
            case ">": op = .greater
            default: op = .greaterOrEqual
            }
        }
        return ArgumentCondition(index: n, op: op, value: rhs)
    }

    private mutating func value() throws(Failure) -> UInt64 {
        var result = try term()
        while current.token == .op("|") {
            index += 1
            result |= try term()
        }
        return result
    }

    private mutating func term() throws(Failure) -> UInt64 {
        let (token, offset) = current
        switch token {
        case .op("("):
            index += 1
            let v = try value()
            guard current.token == .op(")") else {
                throw Failure(offset: current.offset, message: "expected \")\"")
            }
            index += 1
            return v
        case .word(let word):
            index += 1
            if let first = word.first, first.isNumber {
                if let v = Self.number(word) { return v }
                throw Failure(offset: offset, message: "bad number \"\(word)\" (write decimal, or hexadecimal with 0x)")
            }
            if let v = PolicyConstants.values[word] { return v }
            throw Failure(offset: offset, message: "unknown constant \"\(word)\"\(Suggest.hint(for: word, in: PolicyConstants.values.keys))")
        case .end:
            throw Failure(offset: offset, message: "expected a number or a constant at the end of the condition")
        case .op(let o):
            throw Failure(offset: offset, message: "expected a number or a constant, found \"\(o)\"")
        }
    }

    static func number(_ word: String) -> UInt64? {
        let lower = word.lowercased()
        if lower.hasPrefix("0x") { return UInt64(lower.dropFirst(2), radix: 16) }
        return UInt64(lower, radix: 10)
    }
}

extension ArgumentCondition: CustomStringConvertible {
    /// The condition in policy-file syntax, with hexadecimal numbers.
    public var description: String {
        let hex = { (v: UInt64) in v < 10 ? "\(v)" : "0x" + String(v, radix: 16) }
        switch op {
        case .maskedEqual(let mask): return "arg\(index) & \(hex(mask)) == \(hex(value))"
        case .equal: return "arg\(index) == \(hex(value))"
        case .notEqual: return "arg\(index) != \(hex(value))"
        case .less: return "arg\(index) < \(hex(value))"
        case .lessOrEqual: return "arg\(index) <= \(hex(value))"
        case .greater: return "arg\(index) > \(hex(value))"
        case .greaterOrEqual: return "arg\(index) >= \(hex(value))"
        }
    }
}

extension SyscallAction: CustomStringConvertible {
    /// The action in policy-file syntax: `allow`, `kill`, `log`, `errno EPERM`.
    public var description: String {
        switch self {
        case .allow: return "allow"
        case .killProcess: return "kill"
        case .log: return "log"
        case .errno(let e): return "errno \(PolicyConstants.errnoName(e) ?? String(e))"
        }
    }
}
