// swift-tools-version: 6.0
// libFuzzer executables for the fuzz targets of ExtSandboxFuzzing (docs/fuzzing.md).
// Build and run them with scripts/fuzz; they only link with `-sanitize=fuzzer`, so this package
// is separate from the main one (whose `swift build` and `swift test` never see it).
import PackageDescription

/// Target names, as scripts/fuzz and Fuzz/corpus/ call them: executable fuzz-NAME, source in
/// Sources/fuzz-NAME/.
let targets = [
    "frame-decoder",
    "payloads",
    "policy-yaml",
    "docker-import",
    "policy-cache",
    "bundle-manifest",
    "bundle-signature",
    "call-envelope",
]

// The library targets come from the main package through symlinks (Sources/X -> ../../Sources/X)
// rather than as a package dependency: a path dependency's identity is its directory's name, which
// differs between checkouts, and it would drag in the CLI's dependencies. Keep these in step with
// the main Package.swift.
let package = Package(
    name: "extsandbox-fuzz",
    platforms: [.macOS(.v14)],
    targets: [
        .systemLibrary(name: "CSeccomp", pkgConfig: "libseccomp"),
        .systemLibrary(name: "CYAML", pkgConfig: "yaml-0.1"),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto"),
        .target(name: "CSandboxSystem"),
        .target(name: "SandboxSystem", dependencies: ["CSandboxSystem"]),
        .target(name: "YAMLSupport", dependencies: ["CYAML"]),
        .target(name: "SandboxPolicy", dependencies: ["CSeccomp", "YAMLSupport", "SandboxSystem"]),
        .target(name: "PolicyTools", dependencies: ["SandboxPolicy", "SandboxSystem", "YAMLSupport"]),
        .target(name: "DockerProfileImport", dependencies: ["SandboxPolicy", "SandboxSystem", "YAMLSupport"]),
        .target(name: "ExtSandboxWire", dependencies: ["SandboxSystem"]),
        .target(name: "ExtensionCatalog", dependencies: ["YAMLSupport", "SandboxSystem", "CCrypto"]),
        .target(name: "ExtSandboxActors"),
        .target(name: "ExtSandboxFuzzing", dependencies: ["SandboxPolicy", "PolicyTools", "DockerProfileImport", "ExtSandboxWire", "ExtensionCatalog", "ExtSandboxActors"]),
        // libFuzzer's driver behind SwiftPM's renamed `main` (Sources/FuzzDriver/include/FuzzDriver.h).
        .target(name: "FuzzDriver"),
        // The entry points every fuzz executable shares: its `main` and LLVMFuzzerTestOneInput.
        .target(name: "FuzzMain", dependencies: ["ExtSandboxFuzzing", "FuzzDriver"]),
    ] + targets.map { name in
        // Sources/fuzz-NAME/FuzzEntry.swift only names its FuzzTarget.
        .executableTarget(name: "fuzz-" + name, dependencies: ["ExtSandboxFuzzing", "FuzzMain"])
    }
)
