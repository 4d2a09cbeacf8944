/// How versions of one extension are ordered, so that an approval of a signed extension can
/// refuse a rollback (docs/signatures.md, "Versions").
///
/// A version is split at `.` into components; two versions are compared component by component,
/// a missing component counting as `0`. Each component is its leading decimal digits (a number,
/// compared as one) and then the rest (compared bytewise), so `1.10 > 1.9`, `1.0 == 1`,
/// `2.0b < 2.0c`; a component with a suffix ranks after the bare number (`1.0rc1 > 1.0`), which
/// is why signers should raise the number rather than rely on suffixes.
public enum ExtensionVersion {
    /// Whether `version` may be signed: 1 to 64 ASCII letters, digits and `.+-_~`.
    public static func isSignable(_ version: String) -> Bool {
        let bytes = Array(version.utf8)
        return (1...64).contains(bytes.count) && bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) || Array(".+-_~".utf8).contains(byte)
        }
    }

    /// Orders two versions as described above: negative, zero or positive.
    public static func compare(_ a: String, _ b: String) -> Int {
        let left = a.split(separator: ".", omittingEmptySubsequences: false)
        let right = b.split(separator: ".", omittingEmptySubsequences: false)
        for index in 0..<max(left.count, right.count) {
            let x: (number: UInt64, rest: [UInt8]) = index < left.count ? component(left[index]) : (0, [])
            let y: (number: UInt64, rest: [UInt8]) = index < right.count ? component(right[index]) : (0, [])
            if x.number != y.number { return x.number < y.number ? -1 : 1 }
            if x.rest != y.rest { return x.rest.lexicographicallyPrecedes(y.rest) ? -1 : 1 }
        }
        return 0
    }

    /// `a` is not lower than `b`.
    public static func isAtLeast(_ a: String, _ b: String) -> Bool { compare(a, b) >= 0 }

    /// A component's leading number (saturating: a longer run of digits is a huge number, not a
    /// trap) and the bytes after it.
    private static func component(_ text: Substring) -> (number: UInt64, rest: [UInt8]) {
        var number: UInt64 = 0
        var bytes = Array(text.utf8)[...]
        while let digit = bytes.first, (0x30...0x39).contains(digit) {
            let (times, overflow1) = number.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times.addingReportingOverflow(UInt64(digit - 0x30))
            number = overflow1 || overflow2 ? .max : sum
            bytes = bytes.dropFirst()
        }
        return (number, Array(bytes))
    }
}
