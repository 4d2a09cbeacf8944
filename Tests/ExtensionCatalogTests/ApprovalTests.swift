import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// The owner's approvals: pinned to content, stored atomically, never guessed.
@Suite("approvals", .offThePool)
struct ApprovalTests {
    @Test func anApprovalHoldsForTheContentsItWasGivenFor() throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.pinned")
        let store = ApprovalStore(path: world.stateFile)
        func status() throws -> ExtensionStatus {
            let entry = try #require(ExtensionCatalog.scan(world.locations, bundledPoints: []).first { $0.path == path })
            return ExtensionCatalog.status(of: entry, state: try store.load())
        }
        #expect(try status() == .unapproved(reason: "not approved yet"))
        let bundle = try BundleValidator.validate(bundleAt: path).get()
        let approval = try ExtensionCatalog.currentApproval(of: bundle)
        try store.update { $0.approvals["org.example.pinned"] = approval }
        #expect(try status() == .enabled)
        try store.update { $0.disabled.insert("org.example.pinned") }
        #expect(try status() == .disabled)
        try store.update { $0.disabled.remove("org.example.pinned") }

        try world.replaceExecutable(of: path)
        #expect(try status() == .unapproved(reason: "the executable changed since it was approved"))
        try store.update { $0.approvals["org.example.pinned"] = approval }  // the old digests
        // The manifest too: same executable as approved, edited manifest.
        try world.replaceExecutable(of: path, script: "exit 0")
        #expect(try status() == .enabled)
        try world.write(path + "/extension.yaml", (try String(contentsOfFile: path + "/extension.yaml", encoding: .utf8)) + "\n# edited\n")
        let edited = try status()
        #expect(edited == .unapproved(reason: "the manifest changed since it was approved"), "\(edited)")
    }

    @Test func bundledExtensionsAreApprovedImplicitly() throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.inside", in: world.hostBundle + "/Extensions")
        let entry = try #require(ExtensionCatalog.scan(world.locations, bundledPoints: [ExtensionWorld.openPoint]).first { $0.path == path })
        #expect(ExtensionCatalog.status(of: entry, state: ApprovalState()) == .enabled)
        var state = ApprovalState()
        state.disabled.insert("org.example.inside")
        #expect(ExtensionCatalog.status(of: entry, state: state) == .disabled)
    }

    @Test("a corrupt approvals file is an error naming it, and is never replaced", arguments: [
        ("garbage\n", 1, "expected 'extsandbox-approvals 1'"),
        ("extsandbox-approvals 1\napproved org.example.x executable=sha256:12 manifest=sha256:34\n", 2, "expected 'approved ID"),
        ("extsandbox-approvals 1\neverything approved\n", 2, "cannot read 'everything approved'"),
        ("", 1, "empty"),
    ])
    func corrupt(text: String, line: Int, reason: String) throws {
        let world = try ExtensionWorld()
        try world.write(world.stateFile, text)
        let store = ApprovalStore(path: world.stateFile)
        #expect {
            try store.load()
        } throws: { error in
            let problem = error as! CatalogProblem
            return problem.file == world.stateFile && problem.line == line && problem.reason.contains(reason)
        }
        #expect(throws: CatalogProblem.self) { try store.update { $0.disabled.insert("org.example.x") } }
        #expect(try String(contentsOfFile: world.stateFile, encoding: .utf8) == text)
    }

    @Test func anUnreadableApprovalsFileIsAnError() throws {
        let world = try ExtensionWorld()
        try FileManager.default.createDirectory(atPath: world.stateFile, withIntermediateDirectories: true)  // a directory: EISDIR
        #expect {
            try ApprovalStore(path: world.stateFile).load()
        } throws: { error in
            "\(error)".hasPrefix(world.stateFile + ": cannot read the approvals file")
        }
    }

    @Test func theFileRoundTrips() throws {
        var state = ApprovalState()
        state.approvals["org.example.a"] = .init(executable: ContentDigest("sha256:" + String(repeating: "ab", count: 32))!,
                                                 manifest: ContentDigest("sha256:" + String(repeating: "01", count: 32))!)
        state.disabled = ["org.example.b", "org.example.a"]
        #expect(try ApprovalState.parse(state.rendered(), path: "x") == state)
    }

    @Test func sha256MatchesTheStandardVector() throws {
        let world = try ExtensionWorld()
        try world.write(world.root + "/abc", "abc")
        let (digest, _) = try ContentHasher().digest(ofFileAt: world.root + "/abc")
        #expect(digest.description == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
