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
