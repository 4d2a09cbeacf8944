import ExtSandboxFuzzing
import FuzzDriver

/// libFuzzer's entry point: one input per call, through ``FuzzTarget/bundleManifest``.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.bundleManifest.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// The executable's `main` (SwiftPM renames it to `<module>_main`): libFuzzer's driver.
@_cdecl("fuzz_bundle_manifest_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    xsb_fuzz_main(argc, argv)
}
