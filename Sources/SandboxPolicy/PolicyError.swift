/// A problem with a policy file, located at `file:line:column` (1-based).
///
/// Rendered the way compilers render errors, so editors can jump to it:
/// `Policies/standard.yaml:12:7: unknown system call "opnat"; did you mean "openat"?`
///
/// ``PolicyLoader/load(file:)`` throws the first problem of a file and lists the others in
/// ``additional``; ``PolicyLoader/check(file:)`` returns every problem it found.
public struct PolicyError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The file as it was named to the loader (or the policy's name for policies built in code).
    public var file: String
    /// 1-based line; 0 when the problem concerns the file as a whole (missing, unreadable).
    public var line: Int
    /// 1-based column; 0 when unknown.
    public var column: Int
    public var message: String
    /// Further problems found in the same file (only set on an error thrown by `load`).
    public var additional: [PolicyError]

    public init(file: String, line: Int = 0, column: Int = 0, message: String, additional: [PolicyError] = []) {
        self.file = file
        self.line = line
        self.column = column
        self.message = message
        self.additional = additional
    }

    /// `FILE:LINE:COL: message` for this problem alone.
    public var location: String {
        if line <= 0 { return file }
        if column <= 0 { return "\(file):\(line)" }
        return "\(file):\(line):\(column)"
    }

    public var description: String {
        var text = "\(location): \(message)"
        for other in additional {
            text += "\n\(other.location): \(other.message)"
        }
        return text
    }
}

// MARK: - Suggestions

enum Suggest {
    /// Edit distance (insertions, deletions, substitutions and swaps of neighbours), case-insensitive.
    static func distance(_ a: String, _ b: String) -> Int {
        distance(Array(a.lowercased().unicodeScalars), Array(b.lowercased().unicodeScalars))
    }

    /// ``distance(_:_:)`` of lowercased scalars, keeping three rows of the table (not all of them).
    static func distance(_ x: [Unicode.Scalar], _ y: [Unicode.Scalar]) -> Int {
        if x.isEmpty { return y.count }
        if y.isEmpty { return x.count }
        var twoBack = [Int](repeating: 0, count: y.count + 1)
        var previous = Array(0...y.count)
        var row = [Int](repeating: 0, count: y.count + 1)
        for i in 1...x.count {
            row[0] = i
            for j in 1...y.count {
                let cost = x[i - 1] == y[j - 1] ? 0 : 1
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, x[i - 1] == y[j - 2], x[i - 2] == y[j - 1] {
                    row[j] = min(row[j], twoBack[j - 2] + 1)
                }
            }
            (twoBack, previous, row) = (previous, row, twoBack)
        }
        return previous[y.count]
    }

    /// The closest candidate, if it is close enough to be a plausible typo.
    static func closest<S: Sequence>(to word: String, in candidates: S) -> String? where S.Element == String {
        let limit = max(1, min(3, (word.count + 1) / 3))
        let x = Array(word.lowercased().unicodeScalars)
        var best: (String, Int)?
        for candidate in candidates {
            // The distance is at least the difference in length: skip what cannot be within the
            // limit, so a long unknown word costs no table per candidate (fuzzing found a
            // policy with a 256 KiB name taking minutes to check).
            let y = Array(candidate.lowercased().unicodeScalars)
            guard abs(x.count - y.count) <= limit else { continue }
            let d = distance(x, y)
            if d <= limit, best == nil || d < best!.1 || (d == best!.1 && candidate < best!.0) {
                best = (candidate, d)
            }
        }
        return best?.0
    }

    /// `; did you mean "x"?` or the empty string.
    static func hint<S: Sequence>(for word: String, in candidates: S) -> String where S.Element == String {
        closest(to: word, in: candidates).map(hint(match:)) ?? ""
    }

    /// `; did you mean "match"?`
    static func hint(match: String) -> String { "; did you mean \"\(match)\"?" }
}
