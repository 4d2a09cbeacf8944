import Foundation
import TestSupport
@testable import SandboxPolicy

/// The package's root directory.
let packageRoot: URL = TestPaths.packageRoot

let standardPolicyPath = TestPaths.standardPolicyPath

/// A small valid policy.
let minimalPolicy = """
    version: 1
    seccomp:
      default: kill
      allow: ["@default", "@basic-io"]
    """

/// Policy files in a fresh directory under the checkout's .build (trusted, unlike /tmp's).
struct PolicyTree {
    let dir: URL

    init(_ files: [String: String]) throws {
        dir = try TestPaths.makePolicyDirectory("policy-tools")
        for (name, text) in files {
            let url = dir.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: url, atomically: true, encoding: .utf8)
        }
    }

    func path(_ name: String) -> String { dir.appendingPathComponent(name).path }
    var searchPath: PolicySearchPath { PolicySearchPath(directories: [dir.path]) }
}
