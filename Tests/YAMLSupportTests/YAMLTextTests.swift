import Testing
@testable import YAMLSupport
import TestSupport

/// The double-quoted strings extsandbox writes into YAML files (imported policies, point
/// declaration files) read back as exactly the text put in, whatever characters it holds.
@Suite("YAML text", .offThePool)
struct YAMLTextTests {
    static let samples: [String] = [
        "plain", "quote \" and backslash \\", "line\nfeed, tab\t, return\r", "nul \u{0} bell \u{7} escape \u{1B}",
        "del \u{7F}, C1 \u{80} \u{9F}, NEL \u{85}", "separators \u{2028} \u{2029}, BOM \u{FEFF}",
        "non-characters \u{FFFE} \u{FFFF}", "ü, ∀, 𝄞, \u{A0}",
    ]

    @Test(arguments: samples)
    func quotedTextReadsBackExactly(_ text: String) throws {
        let quoted = YAMLText.quoted(text)
        #expect(quoted.unicodeScalars.allSatisfy { $0 != "\n" && YAMLText.isPrintable($0) }, "\(quoted)")
        guard case .mapping(let mapping)? = try YAMLReader.compose("key: \(quoted)\n"),
              let entry = mapping.entries.first, case .scalar(let value) = entry.value else {
            Issue.record("\(quoted) did not read back as a scalar")
            return
        }
        #expect(value.string == text, "\(quoted)")
    }

    /// Why U+FFFE and U+FFFF are escaped: written as they are, the file does not load (the
    /// catalog's own quoting did that before it shared this one).
    @Test func rawNonCharactersMakeTheFileUnreadable() {
        #expect(throws: YAMLError.self) { try YAMLReader.compose("key: \"\u{FFFE}\"\n") }
    }

    /// YAML is Unicode: a file's bytes that are not UTF-8 are an error at their line and column,
    /// never replaced and read on (a UTF-16 byte-order mark is not taken for one either).
    @Test("bytes that are not UTF-8 are an error at their line", arguments: [
        (Array("a: 1\nname: ab".utf8) + [0xFF, 0xFE] + Array("cd\n".utf8), 2, 9, "invalid leading UTF-8 octet 0xFF"),
        ([0xFF, 0xFE] + Array("a: 1\n".utf8), 1, 1, "invalid leading UTF-8 octet 0xFF"),
        (Array("a: 1\n# ".utf8) + [0xC3] + Array("\n".utf8), 2, 4, "invalid trailing UTF-8 octet 0xA"),  // at the line feed
    ] as [([UInt8], Int, Int, String)])
    func bytesThatAreNotUTF8(bytes: [UInt8], line: Int, column: Int, problem: String) {
        #expect {
            try YAMLReader.compose(utf8: bytes)
        } throws: { error in
            let error = error as! YAMLError
            return error.mark == YAMLMark(line: line, column: column) && error.problem == problem + ": the file is not UTF-8 text"
        }
        #expect(throws: Never.self) { try YAMLReader.compose(utf8: Array("a: ü\n".utf8)) }
    }
}
