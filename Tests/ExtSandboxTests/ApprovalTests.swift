import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport
@testable import ExtSandbox

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

    /// Before: root with XDG_STATE_HOME in another user's directory read that user's approvals
    /// (list, monitor, launch) and wrote its own choices there.
    @Test("an approvals file in a directory another user owns is refused on every read and write, naming the path")
    func anotherUsersApprovalsAreRefused() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.echo", executableSource: MonitorTests.echo)
        #expect(try await world.cli(["approve", "org.example.echo"]).status == 0)
        let host = AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
        let monitor = try await AppExtensionPoint.Monitor(points: [MonitorTests.open], host: host)
        let identity = try #require(monitor.identities.first)

        let stateDirectory = (world.stateFile as NSString).deletingLastPathComponent
        try #require(chown(stateDirectory, 65534, 65534) == 0)
        let before = try String(contentsOfFile: world.stateFile, encoding: .utf8)
        func refusal(_ error: any Error) -> Bool {
            "\(error)".hasPrefix("\(world.stateFile): refused: \(stateDirectory) is owned by uid 65534")
        }
        let store = ApprovalStore(path: world.stateFile)
        #expect(performing: { try store.load() }, throws: { error in
            (error as? CatalogProblem)?.kind == .unsafe && refusal(error)
        })
        #expect(performing: { try ExtensionInventory.load(world.locations) }, throws: refusal)
        // The monitor that runs reports it (the directory's chown is an event), a new one fails
        // to start, and the identity it issued no longer launches.
        #expect(await MonitorTests().eventually(monitor) { $0.approvalsProblem.map(refusal) == true && $0.identities.isEmpty })
        await #expect(performing: { try await AppExtensionPoint.Monitor(points: [MonitorTests.open], host: host) }, throws: refusal)
        await #expect(performing: { try await AppExtensionProcess(configuration: .init(identity: identity)) }, throws: refusal)
        // Writing: nothing is written into the other user's directory, not even the lock file.
        try FileManager.default.removeItem(atPath: world.stateFile + ".lock")
        #expect(performing: { try store.update { $0.disabled.insert("org.example.echo") } }, throws: refusal)
        #expect(try String(contentsOfFile: world.stateFile, encoding: .utf8) == before)
        #expect(!FileManager.default.fileExists(atPath: world.stateFile + ".lock"))
        let list = try await world.cli(["list"])
        #expect(list.status != 0 && list.stderr.contains("refused: \(stateDirectory) is owned by uid 65534"), "\(list.stderr)")
        let approve = try await world.cli(["disable", "org.example.echo"])
        #expect(approve.status != 0 && approve.stderr.contains("refused: \(stateDirectory)"), "\(approve.stderr)")
        #expect(try String(contentsOfFile: world.stateFile, encoding: .utf8) == before)

        // The file itself another user's, in the caller's own directory: refused too.
        try #require(chown(stateDirectory, 0, 0) == 0)
        try #require(chown(world.stateFile, 65534, 65534) == 0)
        #expect(performing: { try store.load() }, throws: { error in
            "\(error)".hasPrefix("\(world.stateFile): refused: \(world.stateFile) is owned by uid 65534")
        })
        // A directory others may write into is as bad as another owner.
        try #require(chown(world.stateFile, 0, 0) == 0)
        chmod(stateDirectory, 0o777)
        #expect(performing: { try store.load() }, throws: { error in
            "\(error)".contains("refused: \(stateDirectory) is writable by others")
        })
        chmod(stateDirectory, 0o755)
        #expect(try store.load().approvals.keys.sorted() == ["org.example.echo"])
    }

    @Test("the caller's own approvals and root's are read and written; another user's are not", .oneExitTestAtATime)
    func theCallersOwnAndRootsAreAccepted() async throws {
        let world = try ExtensionWorld()
        var state = ApprovalState()
        state.disabled = ["org.example.x"]
        // Each in a directory of its own owner, the file of that owner too.
        for (name, owner) in [("nobody", uid_t(65534)), ("root", 0), ("other", 1234)] {
            let path = world.root + "/\(name)/approvals"
            try world.write(path, state.rendered())
            chown(path, owner, owner)
            chown(world.root + "/\(name)", owner, owner)
        }
        // As nobody (the exit test's own process drops to uid 65534 first).
        await #expect(processExitsWith: .success) { [root = world.root as String] in
            guard setgroups(0, nil) == 0, setgid(65534) == 0, setuid(65534) == 0 else { exit(90) }
            guard (try? ApprovalStore(path: root + "/nobody/approvals").load().disabled) == ["org.example.x"] else { exit(10) }
            guard (try? ApprovalStore(path: root + "/root/approvals").load().disabled) == ["org.example.x"] else { exit(11) }
            do {
                _ = try ApprovalStore(path: root + "/other/approvals").load()
                exit(12)
            } catch {
                guard (error as? CatalogProblem)?.kind == .unsafe, "\(error)".contains("refused: \(root)/other is owned by uid 1234") else { exit(13) }
            }
            // The caller's own directory takes a change, and a new directory below it is made.
            guard (try? ApprovalStore(path: root + "/nobody/approvals").update { $0.disabled.insert("org.example.y") }) != nil,
                  (try? ApprovalStore(path: root + "/nobody/new/state/approvals").update { $0.disabled.insert("org.example.y") }) != nil
            else { exit(14) }
            exit(0)
        }
        let written = try String(contentsOfFile: world.root + "/nobody/approvals", encoding: .utf8)
        #expect(try ApprovalState.parse(written, path: "").disabled == ["org.example.x", "org.example.y"])
        var info = stat()
        #expect(lstat(world.root + "/nobody/new/state", &info) == 0 && info.st_uid == 65534 && info.st_mode & 0o777 == 0o700)
        // Root reads its own, and (root being trusted by everyone, not the other way round) not nobody's.
        #expect(try ApprovalStore(path: world.root + "/root/approvals").load().disabled == ["org.example.x"])
        #expect(throws: CatalogProblem.self) { try ApprovalStore(path: world.root + "/nobody/approvals").load() }
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
