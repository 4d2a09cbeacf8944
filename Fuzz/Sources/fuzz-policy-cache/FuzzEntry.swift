import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/policyCache`` (`scripts/fuzz policy-cache`).
@main struct PolicyCacheFuzzer: FuzzExecutable { static let target = FuzzTarget.policyCache }
