import Foundation
import Testing
import TestSupport
@testable import PolicyTools
@testable import SandboxPolicy

/// The binary form of resolved policies and the CLI's cache entries (Sources/PolicyTools),
/// and the record of what decided a load (PolicyResolution.swift).
@Suite("Policy cache entries", .offThePool)
struct PolicyCacheEntryTests {
    static let stamp = Array("test-build 1:2:3".utf8)
    static let policiesDirectory = packageRoot.appendingPathComponent("Policies").path
    static let shipped: [String] = {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: policiesDirectory)) ?? []
        return files.filter { $0.hasSuffix(".yaml") }.sorted()
    }()

    static func roundTrip(_ policy: Policy) -> Policy? {
        var w = ByteWriter()
        PolicyBinaryFormat.encode(policy, into: &w)
        var r = ByteReader(w.output)
        let decoded = PolicyBinaryFormat.decodePolicy(from: &r)
        return r.offset == w.output.count ? decoded : nil
    }

    /// An entry for `file`, and what a fresh load gives.
    static func entry(_ file: String, _ searchPath: PolicySearchPath) throws -> (bytes: [UInt8], policy: Policy, filter: CompiledSeccompFilter) {
        let (policy, resolution) = try PolicyLoader.loadRecordingResolution(file: file, searchPath: searchPath)
        let filter = try policy.compileSeccompFilter(mode: .supervised)
        return (PolicyCacheEntry.encode(policy: policy, resolution: resolution, filter: filter, buildStamp: stamp), policy, filter)
    }

    /// The cache's answer for `bytes`: the decoded entry if it is intact and still current.
    static func lookup(_ bytes: [UInt8], _ searchPath: PolicySearchPath, stamp: [UInt8] = stamp) -> PolicyCacheEntry.Contents? {
        guard let contents = PolicyCacheEntry.decode(bytes, buildStamp: stamp),
              contents.resolution.isCurrent(searchPath: searchPath) else { return nil }
        return contents
    }

    @Test("the shipped policies round-trip exactly", arguments: shipped)
    func shippedRoundTrip(_ name: String) throws {
        let searchPath = PolicySearchPath(directories: [Self.policiesDirectory])
        let file = Self.policiesDirectory + "/" + name
        let (bytes, policy, filter) = try Self.entry(file, searchPath)
        #expect(Self.roundTrip(policy) == policy)
        let hit = try #require(Self.lookup(bytes, searchPath))
        #expect(hit.policy == policy)
        #expect(hit.filter == filter)
        #expect(hit.policy == (try PolicyLoader.load(file: file, searchPath: searchPath)))
        #expect(hit.resolution.files.map(\.path) == [file])
    }

    @Test("every field of a policy round-trips")
    func everyField() {
        let full = Policy(
            name: "full", sourcePath: "/some/where/full.yaml", description: "all of it, with ünïcödé and \"quotes\"\n",
            seccomp: SeccompPolicy(
                defaultAction: .errno(1),
                rules: [
                    SyscallRule(syscall: "read", action: .allow),
                    SyscallRule(syscall: "write", action: .log, justification: "why not"),
                    SyscallRule(syscall: "ptrace", action: .killProcess, justification: ""),
                    SyscallRule(syscall: "ioctl", action: .errno(25), conditions: [
                        ArgumentCondition(index: 0, op: .equal, value: 0),
                        ArgumentCondition(index: 1, op: .notEqual, value: 0x5401),
                        ArgumentCondition(index: 2, op: .less, value: 3),
                        ArgumentCondition(index: 3, op: .lessOrEqual, value: .max),
                        ArgumentCondition(index: 4, op: .greater, value: 1 << 40),
                        ArgumentCondition(index: 5, op: .greaterOrEqual, value: 7),
                        ArgumentCondition(index: 1, op: .maskedEqual(mask: 0xffff_0000_ffff_0000), value: 0x1234_0000_0000_0000),
                    ], justification: "terminals"),
                    SyscallRule(syscall: "kill", action: .errno(-1)),
                    SyscallRule(syscall: "clone3", action: .errno(38), justification: PolicyParser.clone3Explanation),
                ],
                allowExecAfterStart: false, memoryDenyWriteExecute: true),
            filesystem: FilesystemPolicy(
                mounts: [
                    .bind(source: "/usr", destination: "/usr", writable: false, optional: false),
                    .bind(source: "/srv/data", destination: "/data", writable: true, optional: true),
                    .bind(source: "/a", destination: "/b", writable: true, optional: false),
                    .bind(source: "/c", destination: "/d", writable: false, optional: true),
                    .tmpfs(destination: "/tmp", sizeBytes: 64 << 20),
                    .tmpfs(destination: "/run", sizeBytes: 0),
                ],
                masked: ["/proc/kcore", "/sys/firmware"]),
            network: .none,
            environment: EnvironmentPolicy(pass: ["PATH", "TERM", "LANG"], set: ["HOME": "/tmp", "LANG": "C.UTF-8", "EMPTY": "", "Z": "="]),
            limits: ResourceLimits(memoryBytes: 1 << 30, processes: 64, cpuSeconds: 10, openFiles: 256,
                                   fileSizeBytes: .max, wallClockSeconds: 0, memoryScope: .perProcess),
            composedFrom: ["/etc/base.yaml", "/some/where/frag.yaml", "/some/where/full.yaml"])
        #expect(Self.roundTrip(full) == full)

        var sparse = full
        sparse.sourcePath = nil
        sparse.description = ""
        sparse.seccomp = SeccompPolicy()
        sparse.filesystem = FilesystemPolicy()
        sparse.environment = EnvironmentPolicy()
        sparse.limits = ResourceLimits(processes: 5)
        sparse.composedFrom = []
        #expect(Self.roundTrip(sparse) == sparse)
        #expect(Self.roundTrip(Policy(name: "", seccomp: SeccompPolicy(defaultAction: .allow))) == Policy(name: "", seccomp: SeccompPolicy(defaultAction: .allow)))
        // Each limit on its own (their order in the format).
        for keyPath in [\ResourceLimits.memoryBytes, \.processes, \.cpuSeconds, \.openFiles, \.fileSizeBytes, \.wallClockSeconds] {
            var one = sparse
            one.limits = ResourceLimits()
            one.limits[keyPath: keyPath] = 42
            #expect(Self.roundTrip(one) == one)
        }
    }

    @Test("policies using extends and include round-trip, resolution included")
    func composedRoundTrip() throws {
        let tree = try PolicyTree([
            "dirs/a/base.yaml": "version: 1\ndescription: base\n" + minimalPolicy.dropFirst("version: 1\n".count),
            "dirs/a/frag.yaml": "version: 1\nenvironment:\n  set: {A: b}\nlimits:\n  memory: 1G\n",
            "p.yaml": "version: 1\nextends: base\ninclude: [frag, ./local.yaml]\nfilesystem:\n  mask: [/x]\n",
            "local.yaml": "version: 1\nfilesystem:\n  tmpfs: {/scratch: 1M}\n",
        ])
        let searchPath = PolicySearchPath(directories: [tree.path("dirs/a"), tree.path("dirs/b")])
        let (bytes, policy, filter) = try Self.entry(tree.path("p.yaml"), searchPath)
        let hit = try #require(Self.lookup(bytes, searchPath))
        #expect(hit.policy == policy)
        #expect(hit.filter == filter)
        #expect(hit.resolution.nameLookups.map(\.name) == ["base", "frag"])
        #expect(hit.resolution.searchDirectories == searchPath.directories)
        #expect(Set(hit.resolution.files.map(\.path)) == Set(policy.composedFrom))
        #expect(policy.composedFrom.count == 4)
    }

    @Test("a truncated, extended or garbled entry is a miss")
    func damagedEntries() throws {
        let searchPath = PolicySearchPath(directories: [Self.policiesDirectory])
        let (bytes, _, _) = try Self.entry(Self.policiesDirectory + "/standard.yaml", searchPath)
        #expect(Self.lookup(bytes, searchPath) != nil)
        // Every prefix near the ends, a sample in between.
        var lengths = Array(0..<min(64, bytes.count)) + Array(max(0, bytes.count - 64)..<bytes.count)
        lengths += stride(from: 64, to: bytes.count, by: 97)
        for length in lengths {
            #expect(PolicyCacheEntry.decode(Array(bytes[..<length]), buildStamp: Self.stamp) == nil, "length \(length)")
        }
        #expect(PolicyCacheEntry.decode(bytes + [0], buildStamp: Self.stamp) == nil)
        // One flipped bit anywhere: the header's checks or the checksum catch it.
        for position in stride(from: 0, to: bytes.count, by: 13) {
            var garbled = bytes
            garbled[position] ^= 1 << UInt8(position % 8)
            #expect(PolicyCacheEntry.decode(garbled, buildStamp: Self.stamp) == nil, "byte \(position)")
        }
    }

    @Test("the decoder is strict even where the checksum matches")
    func strictDecoder() throws {
        let searchPath = PolicySearchPath(directories: [Self.policiesDirectory])
        let (bytes, _, _) = try Self.entry(Self.policiesDirectory + "/standard.yaml", searchPath)
        /// `bytes` changed at `position` and sealed again (length and checksum fixed up).
        func resealed(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var out = bytes
            change(&out)
            let length = UInt64(out.count)
            let sum = out.withUnsafeBytes { PolicyBinaryFormat.checksum(UnsafeRawBufferPointer(rebasing: $0[24...])) }
            for i in 0..<8 {
                out[8 + i] = UInt8(truncatingIfNeeded: length >> (8 * UInt64(i)))
                out[16 + i] = UInt8(truncatingIfNeeded: sum >> (8 * UInt64(i)))
            }
            return out
        }
        #expect(PolicyCacheEntry.decode(resealed { _ in }, buildStamp: Self.stamp) != nil)
        #expect(PolicyCacheEntry.decode(resealed { $0.append(0) }, buildStamp: Self.stamp) == nil, "trailing byte")
        #expect(PolicyCacheEntry.decode(resealed { $0.removeLast() }, buildStamp: Self.stamp) == nil, "short filter")
        #expect(PolicyCacheEntry.decode(resealed { $0[7] = 1 }, buildStamp: Self.stamp) == nil, "format version (1: before memory-scope)")
        #expect(PolicyCacheEntry.decode(resealed { $0[7] = 2 }, buildStamp: Self.stamp) == nil, "format version (2: before memory-deny-write-execute)")
        #expect(PolicyCacheEntry.decode(resealed { $0[7] = 4 }, buildStamp: Self.stamp) == nil, "format version")
        // Any resealed change decodes to nil or to some entry; it never crashes or reads out of bounds.
        for position in stride(from: 24, to: bytes.count, by: 29) {
            for value: UInt8 in [0, 1, 2, 7, 0x80, 0xff] {
                _ = PolicyCacheEntry.decode(resealed { $0[position] = value }, buildStamp: Self.stamp)
            }
        }

        // Tags, booleans and UTF-8 are checked.
        let policy = Policy(name: "n", seccomp: SeccompPolicy(rules: [SyscallRule(syscall: "read", action: .allow)]))
        var w = ByteWriter()
        PolicyBinaryFormat.encode(policy, into: &w)
        let good = w.output
        func decodes(_ change: (inout [UInt8]) -> Void) -> Bool {
            var bytes = good
            change(&bytes)
            var r = ByteReader(bytes)
            return PolicyBinaryFormat.decodePolicy(from: &r) != nil && r.offset == bytes.count
        }
        #expect(decodes { _ in })
        // name "n" (4+1), sourcePath absent (1), description "" (4), then the default action tag.
        #expect(!decodes { $0[10] = 4 }, "unknown action tag")
        #expect(!decodes { $0[5] = 2 }, "optional tag 2")
        #expect(!decodes { $0[4] = 0xff }, "invalid UTF-8")
        #expect(!decodes { $0[0] = 200 }, "string longer than the data")
    }

    @Test("another build's entry is a miss")
    func otherBuild() throws {
        let searchPath = PolicySearchPath(directories: [Self.policiesDirectory])
        let (bytes, _, _) = try Self.entry(Self.policiesDirectory + "/standard.yaml", searchPath)
        #expect(Self.lookup(bytes, searchPath) != nil)
        #expect(Self.lookup(bytes, searchPath, stamp: Array("test-build 1:2:4".utf8)) == nil)
        #expect(Self.lookup(bytes, searchPath, stamp: []) == nil)
    }

    @Test("an entry is stale once anything that decided the load changed")
    func staleness() throws {
        let base = "version: 1\ndescription: base\n" + minimalPolicy.dropFirst("version: 1\n".count)
        let files = [
            "shipped/base.yaml": base,
            "shipped/frag.yaml": "version: 1\nlimits:\n  processes: 10\n",
            "p.yaml": "version: 1\nextends: base\ninclude: [frag, ./local.yaml]\n",
            "local.yaml": "version: 1\nfilesystem:\n  mask: [/x]\n",
        ]
        /// A fresh tree, its entry for p.yaml, and whether the entry still holds after `change`.
        func survives(_ change: (PolicyTree) throws -> Void, searchPath alter: ((PolicySearchPath) -> PolicySearchPath)? = nil) throws -> Bool {
            let tree = try PolicyTree(files)
            defer { try? FileManager.default.removeItem(at: tree.dir) }
            try FileManager.default.createDirectory(atPath: tree.path("admin"), withIntermediateDirectories: true)
            let searchPath = PolicySearchPath(directories: [tree.path("shipped"), tree.path("admin")])
            let (bytes, _, _) = try Self.entry(tree.path("p.yaml"), searchPath)
            try change(tree)
            let now = alter?(searchPath) ?? searchPath
            let hit = Self.lookup(bytes, now)
            if let hit {
                // A hit must be exactly what loading gives now.
                let fresh = try PolicyLoader.load(file: tree.path("p.yaml"), searchPath: now)
                #expect(hit.policy == fresh)
                #expect(hit.filter == (try fresh.compileSeccompFilter(mode: .supervised)))
            }
            return hit != nil
        }
        func write(_ tree: PolicyTree, _ name: String, _ text: String) throws {
            try text.write(toFile: tree.path(name), atomically: true, encoding: .utf8)
        }

        #expect(try survives { _ in })
        #expect(try survives { try write($0, "p.yaml", files["p.yaml"]!) }, "same bytes rewritten")
        #expect(try survives { try write($0, "admin/other.yaml", base) }, "an unrelated new policy")
        #expect(try !survives { try write($0, "p.yaml", files["p.yaml"]! + "# edited\n") }, "the file itself")
        #expect(try !survives { try write($0, "shipped/base.yaml", base + "# edited\n") }, "the extended file")
        #expect(try !survives { try write($0, "shipped/frag.yaml", "version: 1\nlimits:\n  processes: 11\n") }, "an included file")
        #expect(try !survives { try write($0, "local.yaml", "version: 1\n") }, "an included path")
        #expect(try !survives { try write($0, "admin/frag.yaml", files["shipped/frag.yaml"]!) }, "a later directory shadows a name, same bytes")
        #expect(try !survives { try write($0, "admin/base.yaml", base + "# admin's\n") }, "a later directory shadows the base")
        #expect(try !survives { try FileManager.default.removeItem(atPath: $0.path("local.yaml")) }, "an included file removed")
        #expect(try !survives({ _ in }, searchPath: { PolicySearchPath(directories: $0.directories.reversed()) }), "another search path")
        #expect(try !survives({ _ in }, searchPath: { PolicySearchPath(directories: [$0.directories[0]]) }), "a shorter search path")
        // local.yaml becomes a symbolic link to an identical copy: same bytes, another canonical path.
        #expect(try !survives { tree in
            try write(tree, "copy.yaml", files["local.yaml"]!)
            try FileManager.default.removeItem(atPath: tree.path("local.yaml"))
            try FileManager.default.createSymbolicLink(atPath: tree.path("local.yaml"), withDestinationPath: tree.path("copy.yaml"))
        }, "an included path now a symbolic link")
    }

    @Test("a name lookup that skips the referring file is re-run with the same exclusion")
    func excludedLookup() throws {
        // The admin's standard.yaml extends the shipped one of the same name.
        let standard = try String(contentsOfFile: standardPolicyPath, encoding: .utf8)
        let tree = try PolicyTree([
            "shipped/standard.yaml": standard,
            "admin/standard.yaml": "version: 1\nextends: standard\nlimits:\n  processes: 7\n",
        ])
        defer { try? FileManager.default.removeItem(at: tree.dir) }
        let searchPath = PolicySearchPath(directories: [tree.path("shipped"), tree.path("admin")])
        let (bytes, policy, _) = try Self.entry(tree.path("admin/standard.yaml"), searchPath)
        let hit = try #require(Self.lookup(bytes, searchPath))
        #expect(hit.policy == policy)
        #expect(hit.resolution.nameLookups.first?.excluding == PolicyResolver.canonical(tree.path("admin/standard.yaml")))
        #expect(policy.limits.processes == 7)
    }

    @Test("loading with the resolution gives the same policy as loading")
    func sameAsLoad() throws {
        for name in Self.shipped {
            let file = Self.policiesDirectory + "/" + name
            let searchPath = PolicySearchPath(directories: [Self.policiesDirectory])
            #expect(try PolicyLoader.loadRecordingResolution(file: file, searchPath: searchPath).policy
                    == PolicyLoader.load(file: file, searchPath: searchPath))
        }
    }
}
