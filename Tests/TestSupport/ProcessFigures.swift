import Foundation

/// This process's own figures, for tests that check that something leaves them flat (run them
/// in an exit test: other suites' descriptors and memory would count too).
public enum ProcessFigures {
    /// How many file descriptors are open.
    public static func openFileDescriptors() -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count
    }

    /// The resident set size, in KiB (`VmRSS`).
    public static func residentKiB() -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    }
}
