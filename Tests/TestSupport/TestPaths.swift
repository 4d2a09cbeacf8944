import Foundation

/// Where the tests find the checkout's files and the package's built executables.
public enum TestPaths {
    /// The checkout's root (this file is Tests/TestSupport/TestPaths.swift).
    public static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The checkout's Policies directory.
    public static let policiesDirectory: String = packageRoot.appendingPathComponent("Policies").path

    /// The directory of the package's executables: the nearest ancestor of the test runner's
    /// directory that holds `marker` (on some layouts the runner sits inside a .xctest bundle).
    public static func productsDirectory(containing marker: String) -> String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
        while url.path != "/" && !FileManager.default.fileExists(atPath: url.appendingPathComponent(marker).path) {
            url = url.deletingLastPathComponent()
        }
        return url.path
    }
}
