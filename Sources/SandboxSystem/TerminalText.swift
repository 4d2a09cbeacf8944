/// Text that others wrote (a manifest's fields, a declaration's, a bundle's directory name, an
/// extension's messages), made safe to show to a person: on a terminal, control characters
/// would move the cursor, erase lines or recolour them, and bidirectional controls would reorder
/// what follows, so an owner could be shown a table that is not the one read from disk.
package enum TerminalText {
    /// `text` with every character that acts on a terminal or reorders what it shows written
    /// visibly instead: `\t`, `\n`, `\r`, `\e` (ESC) by name; the other C0 controls, DEL and the
    /// C1 controls (U+0080–U+009F) as `\xNN`; the bidirectional marks, embeddings, overrides and
    /// isolates (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and the line and
    /// paragraph separators (U+2028, U+2029) as `\u{NNNN}`. A backslash is shown as it is, so
    /// text escaped twice is unchanged.
    ///
    /// With `keepingLineFeeds`, line feeds stay: for a message whose own lines are meant, made
    /// of parts that were escaped already.
    package static func escaped(_ text: String, keepingLineFeeds: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: needsEscaping) else { return text }
        var out = ""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n" where keepingLineFeeds: out.unicodeScalars.append(scalar)
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\u{1B}": out += "\\e"
            case _ where scalar.value <= 0x9F && needsEscaping(scalar):
                let hex = String(scalar.value, radix: 16)
                out += "\\x" + (hex.count == 1 ? "0" : "") + hex
            case _ where needsEscaping(scalar):
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether `scalar` is shown escaped by ``escaped(_:keepingLineFeeds:)``.
    package static func needsEscaping(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}
