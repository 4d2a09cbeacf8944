import Foundation
import TestSupport
@testable import SandboxPolicy

/// The package's root directory (found by TestSupport's one finder).
let packageRoot: URL = TestPaths.packageRoot

let standardPolicyPath = TestPaths.standardPolicyPath

/// Every problem of a policy given as text, reported against "t.yaml".
func problems(_ yaml: String) -> [PolicyError] {
    PolicyLoader.check(yaml: yaml, name: "t", sourcePath: "t.yaml")
}

/// A fresh directory for policy files: under the checkout's .build, not /tmp (policies under a
/// directory others can write are refused).
func makeTemporaryDirectory() throws -> URL {
    try TestPaths.makePolicyDirectory("policy-tests")
}

/// A small valid policy.
let minimalPolicy = """
    version: 1
    seccomp:
      default: kill
      allow: ["@default", "@basic-io"]
    """
