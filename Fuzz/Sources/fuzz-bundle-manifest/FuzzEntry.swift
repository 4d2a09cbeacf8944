import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/bundleManifest`` (`scripts/fuzz bundle-manifest`).
@main struct BundleManifestFuzzer: FuzzExecutable { static let target = FuzzTarget.bundleManifest }
