// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "extsandbox",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "SandboxRuntime", targets: ["SandboxRuntime"]),
        .library(name: "SandboxPolicy", targets: ["SandboxPolicy"]),
        .library(name: "ExtSandboxWire", targets: ["ExtSandboxWire"]),
        .library(name: "ExtSandbox", targets: ["ExtSandbox"]),
        .library(name: "ExtSandboxExtension", targets: ["ExtSandboxExtension"]),
        .library(name: "ExtSandboxActors", targets: ["ExtSandboxActors"]),
        // The fuzz targets' entry points, for the libFuzzer executables of Fuzz/ (docs/fuzzing.md).
        .library(name: "ExtSandboxFuzzing", targets: ["ExtSandboxFuzzing"]),
        .library(name: "ExtensionCatalog", targets: ["ExtensionCatalog"]),
        // `extsandbox` runs the common shapes of `exec` itself and execs `extsandbox-commands`
        // (next to it, or PREFIX/libexec/extsandbox) for everything else: a one-shot exec then
        // starts without ArgumentParser, Foundation, the catalog and the host API (docs/cli.md).
        .executable(name: "extsandbox", targets: ["extsandbox-front"]),
        .executable(name: "extsandbox-commands", targets: ["extsandbox"]),
        // The sandbox init every sandbox starts as its PID 1; supervisors find it next to their
        // executable or in PREFIX/libexec/extsandbox (Sources/SandboxRuntime/InitExecutable.swift).
        .executable(name: "xsb-init", targets: ["xsb-init"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // The host API's structured logs and counters (not linked by the CLI or the SDK).
        .package(url: "https://github.com/apple/swift-log", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.4.0"),
    ],
    targets: [
        // System libraries, found through pkg-config (scripts/setup installs the -dev packages).
        .systemLibrary(
            name: "CSeccomp", pkgConfig: "libseccomp",
            providers: [.apt(["libseccomp-dev"])]),
        .systemLibrary(
            name: "CYAML", pkgConfig: "yaml-0.1",
            providers: [.apt(["libyaml-dev"])]),
        // SHA-256 for approvals (libcrypto's EVP; docs/extensions.md says why not swift-crypto).
        .systemLibrary(
            name: "CCrypto", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),

        // The C that must run between clone and exec: async-signal-safe raw syscalls only.
        .target(name: "CSandboxShim"),
        // The supervisor's own C helpers (thread names, sealed copies, detached mounts, container
        // volumes): they run in its threads, never between clone and exec.
        .target(name: "CSupervisorSupport"),
        // The OS layer's C helpers: epoll with a token per registration, a bounded readability wait.
        .target(name: "CSandboxSystem"),
        // The sandbox init: a small static C program (no Swift, no dynamic loader), exec'd by
        // every launch so that no sandbox holds anything of its host's memory (docs/architecture.md).
        // -nostartfiles leaves out the Swift runtime's start-up object that swiftc would link.
        // -nostdlib leaves out glibc: its static start-up probes the CPU's features (cpuid, a trip
        // through the hypervisor each on a VM) on every exec of the init (figures in
        // docs/performance.md); Sources/xsb-init/runtime defines what the shim's objects call instead.
        .executableTarget(
            name: "xsb-init", dependencies: ["CSandboxShim"], path: "Sources/xsb-init",
            linkerSettings: [.unsafeFlags(["-nostartfiles", "-static-executable", "-Xclang-linker", "-nostdlib"])]),

        // The OS layer the policy loader, the runtime, the catalog and the CLI share: an owned
        // file descriptor (closed exactly once), the event monitor (one epoll thread), the
        // trusted-path walk, plain file and path helpers.
        .target(name: "SandboxSystem", dependencies: ["CSandboxSystem"]),
        // The YAML reader (libyaml's events into positioned nodes) and writer's quoting, for
        // policies and the catalog's manifests alike; a module of its own so that SandboxSystem,
        // which the SDK links, gains no libyaml.
        .target(name: "YAMLSupport", dependencies: ["CYAML"]),

        // Policy files: parse (YAML), validate, resolve syscall groups, compile to BPF; the one
        // store of loaded and compiled policies (PolicyStore) the CLI, the host API and the runtime use.
        .target(
            name: "SandboxPolicy",
            dependencies: ["CSeccomp", "YAMLSupport", "SandboxSystem"]),

        // What the CLI (and fuzzing) does with policies beyond loading them: the Docker profile
        // importer, the `policy show` report, the per-user policy cache (the store's on-disk layer)
        // and its binary entry format.
        .target(name: "PolicyTools", dependencies: ["SandboxPolicy", "SandboxSystem", "YAMLSupport"]),
        // The Docker seccomp profile importer (`policy import`), apart because it reads JSON with
        // Foundation's decoder, which nothing on the path of a one-shot `exec` should link.
        .target(name: "DockerProfileImport", dependencies: ["SandboxPolicy", "SandboxSystem", "YAMLSupport"]),

        // The host/extension wire protocol: frames, envelope, handshake (docs/wire-protocol.md).
        // Its sockets own their fd as SandboxSystem's FileDescriptor (Glibc, Synchronization and
        // Dispatch, which the SDK links anyway: nothing more in an extension).
        .target(name: "ExtSandboxWire", dependencies: ["SandboxSystem"]),

        // Spawn and supervise: namespaces, mounts, capabilities, limits, seccomp, pidfds.
        .target(name: "SandboxRuntime", dependencies: ["CSandboxShim", "CSupervisorSupport", "CSeccomp", "SandboxPolicy", "SandboxSystem"]),

        // Release builds use `swift build --static-swift-stdlib` (scripts/): loading libswiftCore
        // and Foundation dynamically costs more per `extsandbox exec` than the sandbox itself.
        // Extension bundles, point declarations, the owner's approvals (docs/extensions.md):
        // Foundation-free, for the CLI and the host API alike.
        .target(name: "ExtensionCatalog", dependencies: ["YAMLSupport", "SandboxSystem", "CCrypto"]),

        // Distributed actors over a connection: the actor system both sides run, the call envelope
        // and its value encoding (docs/wire-protocol.md §12). Foundation-free, like the SDK; the
        // host library and the SDK each add their connection's glue.
        .target(name: "ExtSandboxActors"),

        // The host API: extension points, identities, processes, connections, discovery.
        .target(name: "ExtSandbox", dependencies: [
            "SandboxRuntime", "SandboxPolicy", "SandboxSystem", "ExtSandboxWire", "ExtensionCatalog", "ExtSandboxActors",
            .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
        ]),

        // The extension-side SDK: `@main struct X: AppExtension`.
        .target(name: "ExtSandboxExtension", dependencies: ["ExtSandboxWire", "ExtSandboxActors"]),

        .executableTarget(
            name: "extsandbox",
            dependencies: [
                "SandboxRuntime", "SandboxPolicy", "SandboxSystem", "PolicyTools", "DockerProfileImport", "SandboxExec",
                "CBuildInfo", "ExtensionCatalog",
                // `run` and `test` launch extensions on the host API's own path (docs/cli.md).
                "ExtSandbox",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        // The one-shot `exec`: its request, its run on the caller's thread, its standard streams,
        // forwarded signals and status line; both CLI binaries link it.
        .target(name: "SandboxExec", dependencies: ["SandboxRuntime", "SandboxPolicy", "SandboxSystem", "PolicyTools"]),
        .executableTarget(name: "extsandbox-front", dependencies: ["SandboxExec", "SandboxSystem"]),
        // The commit and date scripts/build-cli writes into the linked CLI (`extsandbox --version`).
        .target(name: "CBuildInfo"),

        // Launch benchmarks against bubblewrap and a bare spawn (scripts/bench).
        .executableTarget(name: "xsb-bench", dependencies: ["SandboxRuntime", "SandboxPolicy", "SandboxSystem", "ExtSandbox", "ExtSandboxWire", "ExtensionCatalog", "TextFilterContract"]),
        .executableTarget(name: "xsb-pingpong", path: "Sources/xsb-pingpong"),

        // The README's demo: a host and a sandboxed extension (Examples/).
        // Their typed contract (a @Resolvable protocol), which both depend on.
        .target(name: "UpcaseContract", dependencies: ["ExtSandboxActors"], path: "Examples/UpcaseContract"),
        .executableTarget(name: "extsandbox-demo", dependencies: ["ExtSandbox", "SandboxRuntime", "UpcaseContract"], path: "Examples/DemoHost"),
        .executableTarget(
            name: "upcase-extension", dependencies: ["ExtSandboxExtension", "UpcaseContract"], path: "Examples/UpcaseExtension",
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]),

        // Test fixture: an extension built with the SDK, statically linked so that it runs in
        // sandboxes that do not expose the Swift runtime (hardened among them).
        .executableTarget(
            name: "xsb-echo-extension", dependencies: ["ExtSandboxExtension"], path: "Tests/Fixtures/xsb-echo-extension",
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]),

        // Test fixture: the typed contract (a @Resolvable protocol) of the actors fixture, and the
        // extension that exports it (static, like the echo fixture).
        .target(name: "TextFilterContract", dependencies: ["ExtSandboxActors"], path: "Tests/Fixtures/xsb-actors-contract"),
        .executableTarget(
            name: "xsb-actors-extension", dependencies: ["ExtSandboxExtension", "TextFilterContract"], path: "Tests/Fixtures/xsb-actors-extension",
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]),

        // Test fixture: README.md's typed contract and extension, verbatim (ReadmeSnippetTests
        // checks that they stay so, and runs them; static, like the echo fixture).
        .target(name: "TextTransformContract", dependencies: ["ExtSandboxActors"], path: "Tests/Fixtures/readme-contract"),
        .executableTarget(
            name: "readme-extension", dependencies: ["ExtSandboxExtension", "TextTransformContract"], path: "Tests/Fixtures/readme-extension",
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]),

        // Test fixture: tries forbidden things from inside a sandbox, one per invocation.
        // It runs inside sandboxes that do not expose the Swift runtime: link nothing of it.
        .executableTarget(
            name: "xsb-probe", path: "Tests/Fixtures/xsb-probe",
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]),

        // The C shim's mechanisms one at a time, each called directly: CMechanismSupport runs one
        // in a forked child of the test process (only async-signal-safe code after fork) and
        // reports what it did; CSandboxShimTests holds the cases and their exact outcomes.
        .target(name: "CMechanismSupport", dependencies: ["CSandboxShim"], path: "Tests/CMechanismSupport"),
        // (SandboxRuntime for CArena, which lays out a launch's C structs.)
        .testTarget(name: "CSandboxShimTests", dependencies: ["CSandboxShim", "CMechanismSupport", "SandboxRuntime"]),
        .testTarget(name: "SandboxSystemTests", dependencies: ["SandboxSystem", "TestSupport"]),
        .testTarget(name: "YAMLSupportTests", dependencies: ["YAMLSupport", "TestSupport"]),
        .testTarget(name: "SandboxPolicyTests", dependencies: ["SandboxPolicy", "TestSupport"]),
        .testTarget(name: "PolicyToolsTests", dependencies: ["PolicyTools", "DockerProfileImport", "SandboxPolicy", "TestSupport"]),
        .testTarget(name: "ExtSandboxWireTests", dependencies: ["ExtSandboxWire", "TestSupport"]),
        .testTarget(name: "ExtSandboxActorsTests", dependencies: ["ExtSandboxActors"]),

        // Fuzz targets' entry points (docs/fuzzing.md): built into libFuzzer executables by the
        // separate Fuzz/ package, and replayed over the checked-in seed corpora by FuzzCorpusTests.
        .target(name: "ExtSandboxFuzzing", dependencies: ["SandboxPolicy", "PolicyTools", "DockerProfileImport", "ExtSandboxWire", "ExtensionCatalog", "ExtSandboxActors"]),
        .testTarget(name: "FuzzCorpusTests", dependencies: ["ExtSandboxFuzzing", "TestSupport"]),
        // One finder for the package's paths (build products, fixtures, Policies, the CLI) and the
        // fixtures every test target shares (running executables as root or nobody, extension worlds).
        .target(name: "TestSupport", dependencies: ["ExtensionCatalog", "SandboxPolicy"], path: "Tests/TestSupport"),
        // A FUSE file system that answers its INIT and nothing else, without libfuse: a lookup
        // under it waits, as on a hung mount (DirectoryWatcherTests).
        .target(name: "CFuseSupport", path: "Tests/CFuseSupport"),
        .testTarget(name: "ExtSandboxTests", dependencies: [
            "ExtSandbox", "ExtSandboxWire", "ExtensionCatalog", "SandboxRuntime", "TestSupport", "xsb-init", "extsandbox", "extsandbox-front",
            "TextFilterContract", "TextTransformContract", "CFuseSupport",
            .product(name: "Logging", package: "swift-log"), .product(name: "MetricsTestKit", package: "swift-metrics"),
        ]),
        .testTarget(
            name: "ExtensionCatalogTests",
            dependencies: ["ExtensionCatalog", "ExtSandbox", "SandboxRuntime", "extsandbox", "extsandbox-front", "TestSupport", "xsb-init"]),
        // Host-level faults (issue 14): the host SIGKILLed, launch/use/invalidate cycles, bombs in
        // one sandbox; runs xsb-bench as a child host and the probe (built with the package) as the bomb.
        .testTarget(
            name: "ScaleFaultTests",
            dependencies: ["ExtSandbox", "SandboxRuntime", "SandboxPolicy", "TestSupport", "xsb-bench", "xsb-init"]),
        .testTarget(
            name: "SandboxRuntimeTests",
            dependencies: ["SandboxRuntime", "SandboxPolicy", "SandboxSystem", "xsb-probe", "extsandbox", "extsandbox-front", "TestSupport", "xsb-init"]),
        // The sandbox as a user gets it: `extsandbox exec` against the real kernel, as root and as
        // nobody (isolation probes, policy levels, limits, real programs). The runtime's own
        // mechanisms are tested beside it, in SandboxRuntimeTests.
        .testTarget(
            name: "SandboxEndToEndTests",
            dependencies: ["SandboxRuntime", "SandboxPolicy", "xsb-probe", "extsandbox", "extsandbox-front", "TestSupport", "xsb-init"]),
        // The SDK's runtime, driven over the wire through the echo fixture built with it (a static
        // executable: `swift build --build-tests` builds it; depending on it would link it in here).
        .testTarget(
            name: "ExtSandboxExtensionTests",
            dependencies: ["ExtSandboxExtension", "ExtSandboxWire", "SandboxPolicy", "SandboxRuntime", "TestSupport", "xsb-init"]),
        // The CLI: its argument parsing in process, everything else on the built binary.
        .testTarget(
            name: "extsandboxTests",
            dependencies: [
                "extsandbox", "extsandbox-front", "SandboxExec", "SandboxPolicy", "PolicyTools", "DockerProfileImport", "xsb-probe", "TestSupport", "xsb-init",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
    ]
)
