import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/bundleSignature`` (`scripts/fuzz bundle-signature`).
@main struct BundleSignatureFuzzer: FuzzExecutable { static let target = FuzzTarget.bundleSignature }
