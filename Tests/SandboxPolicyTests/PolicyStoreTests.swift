import Foundation
import Synchronization
import Testing
import TestSupport
@testable import SandboxPolicy

/// The one store of loaded and compiled policies (Sources/SandboxPolicy/PolicyStore.swift): what
/// the CLI, the host API and the supervisor ask for a policy and its filter.
@Suite("Policy store", .offThePool)
struct PolicyStoreTests {
    /// A directory with `base.yaml`, `policies/frag.yaml` (found by name) and `child.yaml`, which
    /// extends the first and includes the second.
    struct Tree {
        let dir: String
        var searchPath: PolicySearchPath { PolicySearchPath(directories: [dir + "/policies"]) }
        var child: String { dir + "/child.yaml" }

        init() throws {
            dir = try makeTemporaryDirectory().path
            try FileManager.default.createDirectory(atPath: dir + "/policies", withIntermediateDirectories: true)
            chmod(dir + "/policies", 0o755)
            try write("base.yaml", minimalPolicy)
            try write("policies/whole.yaml", minimalPolicy)
            try write("policies/frag.yaml", "version: 1\nenvironment:\n  set: {FRAG: one}\n")
            try write("child.yaml", "version: 1\nextends: ./base.yaml\ninclude: [frag]\n")
        }

        func write(_ name: String, _ text: String) throws {
            try Fixtures.writeFile(dir + "/" + name, Array(text.utf8), mode: 0o644)
        }

        func remove() { try? FileManager.default.removeItem(atPath: dir) }
    }

    @Test("an unchanged policy is parsed once; equal policies are one value")
    func unchangedPolicyIsSharedNotReparsed() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let store = PolicyStore()
        let first = try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath)
        let second = try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(first == second)
        #expect(storage(of: first) == storage(of: second))
        #expect(store.counts.loads == 1)

        // A name along the search path is the same file: not parsed again either.
        let byName = try store.policy(nameOrPath: "whole", searchPath: tree.searchPath)
        #expect(storage(of: try store.policy(nameOrPath: "whole", searchPath: tree.searchPath)) == storage(of: byName))
        #expect(store.counts.loads == 2)
    }

    @Test("an edit of any file a policy is made of takes effect at the next request")
    func editTakesEffect() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let store = PolicyStore()
        let before = try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(before.environment.set["FRAG"] == "one")

        // The included file, reached by name.
        try tree.write("policies/frag.yaml", "version: 1\nenvironment:\n  set: {FRAG: two}\n")
        let edited = try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(edited.environment.set["FRAG"] == "two")

        // The extended file, reached by path: its seccomp changes.
        try tree.write("base.yaml", minimalPolicy + "\n  kill: [ptrace]\n")
        let stricter = try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(stricter.seccomp != edited.seccomp)
        #expect(store.counts.loads == 3)

        // A file that no longer loads is an error, not the remembered policy.
        try tree.write("base.yaml", "version: 1\nseccomp: {default: nonsense}\n")
        #expect(throws: PolicyError.self) { try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath) }
    }

    @Test("a policy edited back to what it was shares the first one's storage")
    func equalPoliciesShareStorage() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let store = PolicyStore()
        let original = try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath)
        try tree.write("child.yaml", "version: 1\nextends: ./base.yaml\ninclude: [frag]\n# a comment\n")
        let reloaded = try store.policy(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(store.counts.loads == 2)
        #expect(reloaded == original)
        #expect(storage(of: reloaded) == storage(of: original))
    }

    @Test("each distinct seccomp policy is compiled once, whoever asks")
    func filterCompiledOncePerPolicy() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let store = PolicyStore()
        let (policy, filter) = try store.compiled(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(filter == (try policy.compileSeccompFilter(mode: .supervised)))
        _ = try store.compiled(nameOrPath: tree.child, searchPath: tree.searchPath)
        // An equal seccomp policy loaded elsewhere (the supervisor is given policies, not names).
        let loadedApart = try PolicyLoader.load(file: tree.dir + "/base.yaml", searchPath: tree.searchPath)
        #expect(try store.filter(for: loadedApart) == filter)
        #expect(store.counts.compilations == 1)

        // Another environment, the same seccomp: the same filter.
        try tree.write("policies/frag.yaml", "version: 1\nenvironment:\n  set: {FRAG: two}\n")
        _ = try store.compiled(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(store.counts.compilations == 1)

        let stricter = try PolicyLoader.load(yaml: minimalPolicy + "\n  errno: { EPERM: [chown] }\n", name: "stricter")
        #expect(try store.filter(for: stricter) != filter)
        #expect(store.counts.compilations == 2)
    }

    @Test("concurrent first requests of one policy compile it once")
    func concurrentCompilation() async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let store = PolicyStore()
        let policy = try PolicyLoader.load(file: tree.child, searchPath: tree.searchPath)
        let filters = await withTaskGroup(of: CompiledSeccompFilter?.self) { group in
            for _ in 0..<8 { group.addTask { try? store.filter(for: policy) } }
            return await group.reduce(into: [CompiledSeccompFilter?]()) { $0.append($1) }
        }
        #expect(Set(filters.map { $0?.program ?? [] }).count == 1)
        #expect(store.counts.compilations == 1)
    }

    @Test("with a disk layer: a hit is neither parsed nor compiled; a miss is stored once")
    func diskLayer() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let disk = MemoryDisk()
        let first = PolicyStore(diskLayer: disk)
        let (policy, filter) = try first.compiled(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(first.counts.loads == 1 && first.counts.compilations == 1)
        #expect(disk.stored.withLock { $0.count } == 1)

        // Another process (a new store) over the same disk.
        let second = PolicyStore(diskLayer: disk)
        let hit = try second.compiled(nameOrPath: tree.child, searchPath: tree.searchPath)
        #expect(hit.policy == policy && hit.filter == filter)
        #expect(second.counts.loads == 0 && second.counts.compilations == 0)
        #expect(try second.filter(for: policy) == filter)
        #expect(second.counts.compilations == 0)
        #expect(disk.stored.withLock { $0.count } == 1)
    }

    /// A disk layer in memory, which checks currency as the real one does.
    final class MemoryDisk: PolicyDiskLayer {
        let stored = Mutex<[String: CompiledPolicy]>([:])

        func lookup(file: String, searchPath: PolicySearchPath) -> CompiledPolicy? {
            guard let entry = stored.withLock({ $0[file] }), entry.resolution.isCurrent(searchPath: searchPath) else { return nil }
            return entry
        }

        func store(_ compiled: CompiledPolicy, searchPath: PolicySearchPath) {
            stored.withLock { $0[compiled.policy.sourcePath ?? ""] = compiled }
        }
    }

    private func storage(of policy: Policy) -> UnsafeRawPointer? {
        policy.seccomp.rules.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) }
    }
}
