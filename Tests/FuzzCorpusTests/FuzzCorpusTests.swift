import ExtSandboxFuzzing
import Foundation
import Testing
import TestSupport

/// The checked-in seed corpora (Fuzz/corpus/TARGET/) replayed through the fuzz targets' entry
/// points: cheap, and it keeps the entry points compiling and the seeds meaningful. Fuzzing
/// itself is `scripts/fuzz` (docs/fuzzing.md), never part of this suite.
@Suite("Fuzz corpora", .offThePool)
struct FuzzCorpusTests {
    static let fuzzDirectory = TestPaths.packageRoot.appendingPathComponent("Fuzz")

    static func corpus(_ target: FuzzTarget) -> [URL] {
        let dir = fuzzDirectory.appendingPathComponent("corpus").appendingPathComponent(target.rawValue)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.sorted().map { dir.appendingPathComponent($0) }
    }

    @Test("every seed of every target runs through its entry point", arguments: FuzzTarget.allCases)
    func replay(_ target: FuzzTarget) throws {
        let files = Self.corpus(target)
        #expect(files.count >= 3, "Fuzz/corpus/\(target.rawValue) should hold the target's seeds")
        for file in files {
            target.run(Array(try Data(contentsOf: file)))
        }
    }

    /// The policy-cache seeds are cache entries of the shipped policies: when the format changes
    /// they stop decoding and would only exercise the checks at the start. Regenerate them with
    /// `XSB_WRITE_FUZZ_SEEDS=1 scripts/test --filter FuzzCorpusTests`.
    @Test("the policy-cache seeds are entries of the current format")
    func cacheSeedsAreCurrent() throws {
        let policies = PolicyFuzzing.policiesDirectory
        let dir = Self.fuzzDirectory.appendingPathComponent("corpus/policy-cache")
        if ProcessInfo.processInfo.environment["XSB_WRITE_FUZZ_SEEDS"] == "1" {
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            for name in try FileManager.default.contentsOfDirectory(atPath: policies) where name.hasSuffix(".yaml") {
                let entry = try PolicyFuzzing.cacheSeed(file: policies + "/" + name)
                try Data(entry).write(to: dir.appendingPathComponent(name.replacingOccurrences(of: ".yaml", with: ".entry")))
            }
        }
        let seeds = Self.corpus(.policyCache).filter { $0.pathExtension == "entry" }
        #expect(seeds.count >= 3)
        for seed in seeds {
            #expect(PolicyFuzzing.decodesAsCacheEntry(Array(try Data(contentsOf: seed))),
                    "\(seed.path) is stale: regenerate it (see this test's comment)")
        }
    }
}
