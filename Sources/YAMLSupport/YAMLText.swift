/// Writing YAML: the text of the files extsandbox writes itself (imported policies, point
/// declaration files), so that a YAML reader gets back exactly the strings put in.
package enum YAMLText {
    /// `text` in YAML's double-quoted style. Backslash, quote, line feed and tab are escaped by
    /// name; by number every character YAML does not allow in a file (the C0 and C1 controls, DEL,
    /// U+FFFE, U+FFFF) and those readers take for line breaks or invisible marks (NEL U+0085,
    /// the line and paragraph separators U+2028 and U+2029, the byte-order mark U+FEFF).
    package static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case _ where needsEscape(scalar):
                let hex = String(scalar.value, radix: 16)
                out += scalar.value <= 0xff
                    ? "\\x" + String(repeating: "0", count: 2 - hex.count) + hex
                    : "\\u" + String(repeating: "0", count: 4 - hex.count) + hex  // at most U+FFFF here
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// YAML's c-printable: tab, line feed, carriage return, U+0020–U+007E, U+0085, and U+00A0
    /// and above but U+FFFE and U+FFFF (Swift strings hold no surrogates). Nothing else may stand
    /// anywhere in a YAML file, comments included.
    package static func isPrintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x09, 0x0A, 0x0D, 0x20...0x7E, 0x85: true
        case 0xA0...0xFFFD: true
        case 0x10000...: true
        default: false
        }
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value) || [0x2028, 0x2029, 0xfeff].contains(scalar.value)
            || !isPrintable(scalar)
    }
}
