import Foundation
import Testing

/// Where an exit test's child process says why it failed: Swift Testing hands back nothing of a
/// child that exited otherwise than expected. Made by the test, captured by the child (it is
/// Codable), read back by the test after the child ended.
struct ExitTestLog: Codable, Sendable {
    let path: String

    init() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-exit-test-\(UUID().uuidString).log").path
    }

    /// In the child: appends a line (also to standard error).
    func write(_ line: String) {
        FileHandle.standardError.write(Data("\(line)\n".utf8))
        guard let handle = FileHandle(forWritingAtPath: path) ?? {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            return FileHandle(forWritingAtPath: path)
        }() else { return }
        handle.seekToEndOfFile()
        handle.write(Data("\(line)\n".utf8))
        try? handle.close()
    }

    /// In the test, once the child ended: records what it wrote as an issue if `failed`, and
    /// removes the file.
    func finish(failed: Bool, sourceLocation: SourceLocation = #_sourceLocation) {
        if failed, let text = try? String(contentsOfFile: path, encoding: .utf8), !text.isEmpty {
            Issue.record(Comment(rawValue: text), sourceLocation: sourceLocation)
        }
        try? FileManager.default.removeItem(atPath: path)
    }
}
