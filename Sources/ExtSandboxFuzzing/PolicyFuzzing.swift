import DockerProfileImport
import FoundationEssentials
import PolicyTools
import SandboxPolicy

/// Fuzz entry points of the policy code (SandboxPolicy): YAML text, Docker profiles, the binary
/// policy cache.
public enum PolicyFuzzing {
    /// The repository's Policies directory: the search path of ``policyYAML(_:)``, so that inputs
    /// can `extends:`/`include:` the shipped policies (found from this file's path at build time).
    public static let policiesDirectory: String = {
        var parts = #filePath.split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast(3)  // Sources/ExtSandboxFuzzing/PolicyFuzzing.swift
        return parts.joined(separator: "/") + "/Policies"
    }()

    /// Where ``policyYAML(_:)`` pretends the text comes from: a directory that does not exist, so
    /// relative `include:` paths resolve to nothing and the input is the only file read besides
    /// the shipped policies.
    static let sourcePath = "/nonexistent-xsb-fuzz/fuzz.yaml"

    /// The build stamp of ``policyCache(_:)``'s entries (the seeds are written with it).
    public static let buildStamp: [UInt8] = Array("xsb-fuzz".utf8)

    /// Input: policy text (UTF-8; other bytes are skipped, as the loader refuses them before
    /// parsing). Properties: loading never crashes or traps; a policy that loads compiles (or is
    /// refused with an error) in both filter modes; it goes through a cache entry and back
    /// unchanged.
    public static func policyYAML(_ input: UnsafeRawBufferPointer) {
        guard let text = String(validating: input, as: UTF8.self) else { return }
        let policy: Policy
        do {
            policy = try PolicyLoader.load(
                yaml: text, name: "fuzz", sourcePath: sourcePath,
                searchPath: PolicySearchPath(directories: [policiesDirectory]))
        } catch {
            require(!error.description.isEmpty, "an empty error message")
            return
        }
        _ = try? policy.compileSeccompFilter(mode: .inKernel)
        guard let filter = try? policy.compileSeccompFilter(mode: .supervised) else { return }
        require(!filter.program.isEmpty && filter.program.count % 8 == 0, "a filter of \(filter.program.count) bytes")

        var resolution = PolicyResolution()
        resolution.files = [PolicyResolution.File(path: sourcePath, bytes: Array(text.utf8))]
        for file in policy.composedFrom where file != sourcePath {
            resolution.files.append(PolicyResolution.File(path: file, bytes: []))
        }
        let entry = PolicyCacheEntry.encode(policy: policy, resolution: resolution, filter: filter, buildStamp: buildStamp)
        let decoded = PolicyCacheEntry.decode(entry, buildStamp: buildStamp)
        require(decoded?.policy == policy, "the policy does not survive its cache entry: \(policy)")
        require(decoded?.resolution == resolution && decoded?.filter == filter, "the resolution or filter does not survive the cache entry")
    }

    /// Input: a Docker/OCI seccomp profile (JSON). Properties: the import never crashes or traps;
    /// what it writes is YAML that the policy parser reads without a syntax error and with no
    /// key the import did not mean to write (profile text cannot inject YAML).
    public static func dockerImport(_ input: UnsafeRawBufferPointer) {
        let output: DockerProfileImporter.Output
        do {
            output = try DockerProfileImporter.convert(json: Data(input), source: "fuzz.json")
        } catch {
            require(!error.message.isEmpty, "an empty error message")
            return
        }
        for warning in output.warnings {
            require(!warning.contains("YAML syntax error") && !warning.contains("unknown key"),
                    "the imported policy is not what the import meant to write: \(warning)\n\(output.yaml)")
        }
    }

    /// Input: a policy cache entry; its length and checksum fields are filled in before decoding
    /// (random bytes would never pass the checksum, and the decoder behind it is what matters).
    /// Properties: decoding never crashes or traps; an entry that decodes encodes back to exactly
    /// its bytes (the format has one encoding per value).
    public static func policyCache(_ input: UnsafeRawBufferPointer) {
        var bytes = [UInt8](input)
        PolicyCacheEntry.seal(&bytes)
        guard let contents = PolicyCacheEntry.decode(bytes, buildStamp: buildStamp) else { return }
        let again = PolicyCacheEntry.encode(
            policy: contents.policy, resolution: contents.resolution, filter: contents.filter, buildStamp: buildStamp)
        require(again == bytes, "a decoded cache entry re-encodes to other bytes")
    }

    /// Whether `bytes` (length and checksum filled in) decode as a cache entry of ``buildStamp``.
    public static func decodesAsCacheEntry(_ bytes: [UInt8]) -> Bool {
        var bytes = bytes
        PolicyCacheEntry.seal(&bytes)
        return PolicyCacheEntry.decode(bytes, buildStamp: buildStamp) != nil
    }

    /// A seed for ``policyCache(_:)``: the cache entry of the shipped policy `file`.
    public static func cacheSeed(file: String) throws -> [UInt8] {
        let searchPath = PolicySearchPath(directories: [policiesDirectory])
        let (policy, resolution) = try PolicyLoader.loadRecordingResolution(file: file, searchPath: searchPath)
        let filter = try policy.compileSeccompFilter(mode: .supervised)
        return PolicyCacheEntry.encode(policy: policy, resolution: resolution, filter: filter, buildStamp: buildStamp)
    }
}
