import Foundation
@testable import SandboxPolicy

/// The package's root directory (this file is Tests/SandboxPolicyTests/Support.swift).
let packageRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

let standardPolicyPath = packageRoot.appendingPathComponent("Policies/standard.yaml").path

/// Every problem of a policy given as text, reported against "t.yaml".
func problems(_ yaml: String) -> [PolicyError] {
    PolicyLoader.check(yaml: yaml, name: "t", sourcePath: "t.yaml")
}

/// A fresh temporary directory.
func makeTemporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory
        .appendingPathComponent("xsb-policy-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// A small valid policy.
let minimalPolicy = """
    version: 1
    seccomp:
      default: kill
      allow: ["@default", "@basic-io"]
    """
