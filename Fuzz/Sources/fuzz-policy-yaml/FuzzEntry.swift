import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/policyYAML`` (`scripts/fuzz policy-yaml`).
@main struct PolicyYAMLFuzzer: FuzzExecutable { static let target = FuzzTarget.policyYAML }
