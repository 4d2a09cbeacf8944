import Glibc
import SandboxSystem
import Synchronization

/// Where the CLI's own lines go: standard error, or, while a sandboxed program writes to a
/// regular file that is the CLI's standard error, the program's own description of that file, so
/// that the two share one file offset and neither overwrites the other (SandboxStreams).
package let diagnosticsDescriptor = Atomic<Int32>(2)

/// Writes "extsandbox: MESSAGE" and a newline to stderr, in one write where it fits. Control
/// characters in the message are shown escaped (its line feeds kept): messages quote manifests,
/// bundle paths and what extensions said.
package func printError(_ message: String) {
    let bytes = Array("extsandbox: \(TerminalText.escaped(message, keepingLineFeeds: true))\n".utf8)
    writeAll(diagnosticsDescriptor.load(ordering: .acquiring), bytes)
}

/// Writes an error and, on the next line, what to do about it:
/// `extsandbox: MESSAGE` then `extsandbox: hint: WHAT TO DO`.
package func printError(_ message: String, hint: String?) {
    printError(message)
    if let hint { printError("hint: \(hint)") }
}

