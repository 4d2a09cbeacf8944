import SandboxSystem
import Testing

/// Others' text shown to people: nothing in it may act on a terminal or reorder a line.
@Suite("Terminal text")
struct TerminalTextTests {
    @Test func controlsAreShownVisibly() {
        #expect(TerminalText.escaped("1\u{1B}[2K\u{1B}[1Genabled") == "1\\e[2K\\e[1Genabled")
        #expect(TerminalText.escaped("a\tb\nc\rd\u{0}e\u{7}") == "a\\tb\\nc\\rd\\x00e\\x07")
        #expect(TerminalText.escaped("del\u{7F} csi\u{9B}31m nel\u{85}") == "del\\x7f csi\\x9b31m nel\\x85")
        #expect(TerminalText.escaped("abc\u{202E}fed\u{2066}x\u{2069}\u{200F}\u{2028}")
            == "abc\\u{202e}fed\\u{2066}x\\u{2069}\\u{200f}\\u{2028}")
    }

    @Test func printableTextIsUnchangedAndEscapingTwiceChangesNothing() {
        for text in ["org.example.echo 1.0", "/tmp/ä ö/Mine.appex", "日本語 \\e literal", ""] {
            #expect(TerminalText.escaped(text) == text)
        }
        let once = TerminalText.escaped("x\u{1B}]0;title\u{7}\n\u{202E}")
        #expect(TerminalText.escaped(once) == once)
        #expect(!once.unicodeScalars.contains { TerminalText.needsEscaping($0) })
    }

    @Test func aMessageMayKeepItsOwnLines() {
        #expect(TerminalText.escaped("a.yaml:1: x\u{1B}[2K\nb.yaml:2: y", keepingLineFeeds: true) == "a.yaml:1: x\\e[2K\nb.yaml:2: y")
        #expect(TerminalText.escaped("a\r\nb", keepingLineFeeds: true) == "a\\r\nb")
    }
}
