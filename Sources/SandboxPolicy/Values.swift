enum Values {
    static let binaryUnits: [Character: UInt64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]

    /// `64K`, `256M`, `1G`, `2T` (binary units) or plain bytes.
    static func size(_ text: String) -> UInt64? {
        var digits = Substring(text)
        var unit: UInt64 = 1
        if let last = text.last, let m = binaryUnits[Character(last.uppercased())] {
            unit = m
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCIIDigit), let n = UInt64(digits) else { return nil }
        let (product, overflow) = n.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }

    /// A plain decimal count.
    static func count(_ text: String) -> UInt64? {
        guard !text.isEmpty, text.allSatisfy(\.isASCIIDigit) else { return nil }
        return UInt64(text)
    }

    /// Seconds: `600`, `600s`, `10m`, `2h`.
    static func seconds(_ text: String) -> UInt64? {
        let units: [Character: UInt64] = ["s": 1, "m": 60, "h": 3600]
        var digits = Substring(text)
        var unit: UInt64 = 1
        if let last = text.last, let m = units[last] {
            unit = m
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCIIDigit), let n = UInt64(digits) else { return nil }
        let (product, overflow) = n.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }

    static func isUnlimited(_ text: String) -> Bool { text == "none" || text == "unlimited" }

    /// An environment variable name.
    static func isVariableName(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic)
        else { return false }
        return text.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) }
    }
}

extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
