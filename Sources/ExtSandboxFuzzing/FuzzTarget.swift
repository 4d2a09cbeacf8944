/// The fuzz targets of the package: one entry point per parser that reads untrusted bytes.
///
/// Each entry point takes one input, runs it through the parser and checks what must hold for
/// every input (no crash, no leaked file descriptor, round trips that reproduce the input). A
/// violated property stops the process with `fatalError`, which libFuzzer reports as a crash.
///
/// The same entry points serve the libFuzzer executables of the `Fuzz/` package (`scripts/fuzz`,
/// docs/fuzzing.md) and the corpus replay of the normal test suite (Tests/FuzzCorpusTests), which
/// keeps them compiling and the checked-in seeds passing.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// ``FrameDecoder``: a byte stream, cut into chunks, with and without fds.
    case frameDecoder = "frame-decoder"
    /// The handshake and payload parsers: ``Hello``, ``ErrorPayload``, ``FrameHeader``.
    case payloads = "payloads"
    /// ``PolicyLoader/load(yaml:name:sourcePath:searchPath:)``: policy text, then the compiler.
    case policyYAML = "policy-yaml"
    /// ``DockerProfileImporter/convert(json:source:)``: a Docker/OCI seccomp profile.
    case dockerImport = "docker-import"
    /// ``PolicyCacheEntry/decode(_:buildStamp:)``: the CLI's binary policy cache.
    case policyCache = "policy-cache"
    /// ``ExtensionManifest``, ``BundleValidator`` and ``PointDeclarationFile``: a bundle's
    /// `extension.yaml` (validated in a bundle directory) and a point declaration file.
    case bundleManifest = "bundle-manifest"
    /// ``BundleSignature/parse(_:path:)``: a bundle's `extension.signature`.
    case bundleSignature = "bundle-signature"
    /// ``CallEnvelope`` and the value decoder of distributed calls: a REQUEST's or REPLY's payload.
    case callEnvelope = "call-envelope"

    /// Runs one input through the target.
    public func run(_ input: UnsafeRawBufferPointer) {
        switch self {
        case .frameDecoder: WireFuzzing.frameDecoder(input)
        case .payloads: WireFuzzing.payloads(input)
        case .policyYAML: PolicyFuzzing.policyYAML(input)
        case .dockerImport: PolicyFuzzing.dockerImport(input)
        case .policyCache: PolicyFuzzing.policyCache(input)
        case .bundleManifest: BundleManifestFuzzing.bundleManifest(input)
        case .bundleSignature: SignatureFuzzing.bundleSignature(input)
        case .callEnvelope: ActorsFuzzing.callEnvelope(input)
        }
    }

    /// Runs one input given as an array.
    public func run(_ input: [UInt8]) {
        input.withUnsafeBytes { run($0) }
    }
}

/// Stops the process with `message` when a property of a fuzz target does not hold.
@inline(never)
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
             file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fatalError("fuzz property violated: \(message())", file: file, line: line) }
}

/// A tiny deterministic generator (splitmix64) so that an input decides its own chunking.
struct SplitMix {
    var state: UInt64
    init(seed: UInt8) { state = 0x9e37_79b9_7f4a_7c15 &* (UInt64(seed) &+ 1) }
    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
