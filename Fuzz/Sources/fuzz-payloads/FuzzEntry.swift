import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/payloads`` (`scripts/fuzz payloads`).
@main struct PayloadsFuzzer: FuzzExecutable { static let target = FuzzTarget.payloads }
