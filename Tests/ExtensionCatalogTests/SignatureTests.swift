import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// Developer signatures: what a signature covers, and approvals pinned to signer, identifier and
/// version (docs/signatures.md).
@Suite("signatures", .offThePool)
struct SignatureTests {
    static let identifier = "org.example.signed"

    /// A bundle with a manifest, an executable, a resource in a subdirectory and a link.
    func signedBundle(_ world: ExtensionWorld, key: SigningKey, version: String = "1.0", in directory: String? = nil) throws -> String {
        let path = try world.install(Self.identifier, in: directory, manifest: manifest(version: version))
        try world.write(path + "/share/words.txt", "alpha\nbeta\n")
        symlink("words.txt", path + "/share/latest")
        try BundleSigning.sign(bundleAt: path, with: key)
        return path
    }

    func manifest(version: String) -> String {
        """
        schema: 1
        identifier: \(Self.identifier)
        name: Signed
        version: "\(version)"
        point: \(ExtensionWorld.openPoint)
        executable: bin/run
        resources:
          - share/words.txt
        """
    }

    func check(_ path: String) throws -> SignatureCheck {
        BundleSigning.check(try BundleValidator.validate(bundleAt: path).get())
    }

    func reason(_ check: SignatureCheck) -> String? {
        if case .broken(let reason) = check { return reason }
        return nil
    }

    func entry(_ path: String) throws -> CatalogEntry {
        CatalogEntry(path: path, origin: .external(directory: (path as NSString).deletingLastPathComponent), bundle: BundleValidator.validate(bundleAt: path))
    }

    @Test func aSignedBundleVerifiesAndListsEveryFile() throws {
        let world = try ExtensionWorld()
        let key = SigningKey.generate()
        let path = try signedBundle(world, key: key)
        guard case .valid(let signature) = try check(path) else { Issue.record("\(try check(path))"); return }
        #expect(signature.signer == key.publicKey)
        #expect(signature.identifier == Self.identifier && signature.version == "1.0")
        #expect(signature.entries.map(\.path) == ["bin", "bin/run", "extension.yaml", "share", "share/latest", "share/words.txt"])
        // The file is canonical: parsing and rendering give back its bytes.
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path + "/" + BundleSignature.fileName)))
        #expect(Array(try BundleSignature.parse(bytes, path: "x").rendered().utf8) == bytes)
    }

    @Test("a changed byte in any file breaks the signature", arguments: [
        ("bin/run", "exit 0", "exit 1"), ("extension.yaml", "name: Signed", "name: Signee"), ("share/words.txt", "beta", "beto"),
    ])
    func changedByte(file: String, was: String, now: String) throws {
        let world = try ExtensionWorld()
        let path = try signedBundle(world, key: SigningKey.generate())
        let full = path + "/" + file
        let text = try String(contentsOfFile: full, encoding: .utf8)
        #expect(text.contains(was))
        var info = stat()
        stat(full, &info)
        try Fixtures.writeFile(full, Array(text.replacingOccurrences(of: was, with: now).utf8), mode: info.st_mode & 0o7777)
        #expect(reason(try check(path)) == "\(file) changed since the bundle was signed")
    }

    @Test func anAddedRemovedRenamedOrReModedFileBreaksIt() throws {
        let world = try ExtensionWorld()
        let path = try signedBundle(world, key: SigningKey.generate())
        try world.write(path + "/share/extra.txt", "new")
        #expect(reason(try check(path)) == "share/extra.txt was added after the bundle was signed")
        unlink(path + "/share/extra.txt")
        #expect(try check(path).signer != nil)
        // A renamed file: the signature lists the old name, the bundle holds the new one.
        rename(path + "/bin/run", path + "/bin/run2")
        symlink("run2", path + "/bin/run")
        #expect(reason(try check(path)) == "bin/run is a symbolic link now; it was a file when the bundle was signed")
        unlink(path + "/bin/run")
        rename(path + "/bin/run2", path + "/bin/run")
        #expect(try check(path).signer != nil)

        rename(path + "/share/words.txt", path + "/share/words.txt~")
        symlink("words.txt~", path + "/share/words.txt")
        // (the manifest names share/words.txt: a link to the renamed file keeps the bundle valid)
        #expect(reason(try check(path)) == "share/words.txt is a symbolic link now; it was a file when the bundle was signed")
        unlink(path + "/share/words.txt")
        rename(path + "/share/words.txt~", path + "/share/words.txt")
        try world.write(path + "/share/words.bak", "x")
        unlink(path + "/share/latest")
        #expect(reason(try check(path)) == "share/latest was removed since the bundle was signed")
        unlink(path + "/share/words.bak")
        symlink("words.txt", path + "/share/latest")

        chmod(path + "/share/words.txt", 0o600)
        #expect(reason(try check(path)) == "the mode of share/words.txt changed since the bundle was signed (0644 → 0600)")
        chmod(path + "/share/words.txt", 0o644)

        unlink(path + "/share/latest")
        symlink("/etc/passwd", path + "/share/latest")
        #expect(reason(try check(path)) == "the symbolic link share/latest points elsewhere since the bundle was signed")
    }

    @Test func aReplacedOrForgedSignatureIsBroken() throws {
        let world = try ExtensionWorld()
        let path = try signedBundle(world, key: SigningKey.generate())
        let file = path + "/" + BundleSignature.fileName
        let original = try String(contentsOfFile: file, encoding: .utf8)

        // Another key's signature over the same listing, with the signer line left as it was.
        var forged = try BundleSignature.parse(Array(original.utf8), path: file)
        forged.signature = try SigningKey.generate().sign(Array(forged.signedText.utf8))
        try world.write(file, forged.rendered())
        #expect(reason(try check(path))?.hasPrefix("the signature does not verify") == true)

        // A listing edited to match a changed file, the signature kept.
        try world.write(path + "/share/words.txt", "gamma\n")
        let digest = ContentHasher.digest(of: Array("gamma\n".utf8))
        var edited = try BundleSignature.parse(Array(original.utf8), path: file)
        edited.entries = edited.entries.map { $0.path == "share/words.txt" ? .init(path: $0.path, kind: .file(mode: 0o644, digest: digest)) : $0 }
        try world.write(file, edited.rendered())
        #expect(reason(try check(path))?.hasPrefix("the signature does not verify") == true)

        // Replaced whole: a valid signature by a foreign key verifies, as that key's.
        let foreign = SigningKey.generate()
        try BundleSigning.sign(bundleAt: path, with: foreign)
        #expect(try check(path).signer == foreign.publicKey)
    }

    @Test func anApprovalOfASignedExtensionFollowsItsSignerAndVersion() throws {
        let world = try ExtensionWorld()
        let key = SigningKey.generate()
        let path = try signedBundle(world, key: key, version: "1.2")
        var state = ApprovalState()
        state.signedApprovals[Self.identifier] = .init(signer: key.publicKey, version: "1.2")
        func status() throws -> ExtensionStatus { ExtensionCatalog.status(of: try entry(path), state: state) }
        #expect(try status() == .enabled)

        // An update by the same key, a new executable and a higher version: still approved.
        try world.write(path + "/extension.yaml", manifest(version: "1.10"))
        try world.replaceExecutable(of: path, script: "exit 3")
        try BundleSigning.sign(bundleAt: path, with: key)
        #expect(try status() == .enabled)

        // A rollback, validly signed by the same key.
        try world.write(path + "/extension.yaml", manifest(version: "1.1"))
        try BundleSigning.sign(bundleAt: path, with: key)
        #expect(try status() == .unapproved(reason: "version 1.1 is lower than the approved 1.2 (a rollback)"))

        // Another key.
        let other = SigningKey.generate()
        try world.write(path + "/extension.yaml", manifest(version: "2.0"))
        try BundleSigning.sign(bundleAt: path, with: other)
        #expect(try status() == .unapproved(reason: "it is signed by another key (\(other.publicKey)); it was approved for bundles signed by \(key.publicKey)"))

        // Broken: signed, then changed.
        try BundleSigning.sign(bundleAt: path, with: key)
        #expect(try status() == .enabled)
        try world.replaceExecutable(of: path, script: "exit 4")
        #expect(try status() == .unapproved(reason: "its signature is broken: bin/run changed since the bundle was signed"))

        // Unsigned.
        unlink(path + "/" + BundleSignature.fileName)
        #expect(try status() == .unapproved(reason: "it is not signed, and it was approved for bundles signed by \(key.publicKey)"))
    }

    @Test func aTrustedSignerApprovesWhatItSigns() throws {
        let world = try ExtensionWorld()
        let key = SigningKey.generate()
        let path = try signedBundle(world, key: key)
        var state = ApprovalState()
        #expect(ExtensionCatalog.status(of: try entry(path), state: state) == .unapproved(reason: "not approved yet"))
        state.trustedSigners.insert(key.publicKey)
        let evaluation = ExtensionDecisions(user: state).evaluate(try entry(path))
        #expect(evaluation.status == .enabled)
        #expect(evaluation.source == .userSigner)
        state.trustedSigners = [SigningKey.generate().publicKey]
        #expect(ExtensionCatalog.status(of: try entry(path), state: state) == .unapproved(reason: "not approved yet"))
    }

    @Test func versionsCompareByNumbers() {
        #expect(ExtensionVersion.compare("1.10", "1.9") > 0)
        #expect(ExtensionVersion.compare("1.0", "1") == 0)
        #expect(ExtensionVersion.compare("2.0b", "2.0c") < 0)
        #expect(ExtensionVersion.compare("1.0rc1", "1.0") > 0)
        #expect(ExtensionVersion.compare("99999999999999999999999", "1") > 0)
    }

    @Test func keyFilesReadBackAndRefuseOthersAccess() throws {
        let world = try ExtensionWorld()
        let key = SigningKey.generate()
        let file = world.root + "/signing.key"
        try world.write(file, key.rendered(), mode: 0o600)
        #expect(try SigningKey.load(file).publicKey == key.publicKey)
        chmod(file, 0o644)
        #expect(throws: CatalogProblem.self) { try SigningKey.load(file) }
        // A public line that is not the seed's (an edited file) is refused rather than used.
        let other = SigningKey.generate().publicKey
        try world.write(file, key.rendered().replacingOccurrences(of: "\(key.publicKey)", with: "\(other)"), mode: 0o600)
        #expect(throws: CatalogProblem.self) { try SigningKey.load(file) }
    }

    @Test("a signature file that is not exactly the format is refused, naming the line", arguments: [
        ("extsandbox-signature 2\n", 1),
        ("extsandbox-signature 1\nidentifier org.example.x\nversion 1 0\n", 3),
        ("extsandbox-signature 1\nidentifier org.example.x\nversion 1.0\nsigner ed25519:00\n", 4),
    ])
    func malformed(text: String, line: Int) {
        #expect {
            _ = try BundleSignature.parse(Array(text.utf8), path: "/b/extension.signature")
        } throws: { error in
            (error as? CatalogProblem)?.line == line
        }
    }

    @Test func theListingMustBeSortedCompleteAndWithoutDotDot() throws {
        let key = SigningKey.generate()
        let digest = ContentHasher.digest(of: [])
        func text(_ lines: [String]) -> [UInt8] {
            Array((["extsandbox-signature 1", "identifier org.example.x", "version 1.0", "signer \(key.publicKey)"] + lines
                + ["signature " + String(repeating: "00", count: 64)]).joined(separator: "\n").utf8 + [0x0a])
        }
        let manifest = "file 0644 \(digest) extension.yaml"
        #expect(throws: Never.self) { try BundleSignature.parse(text([manifest]), path: "s") }
        for (lines, reason) in [
            (["file 0644 \(digest) zz", manifest], "not sorted"),
            ([manifest, manifest], "listed twice"),
            (["file 0644 \(digest) bin/run", manifest], "its directory bin is not"),
            (["dir 0755 a", "file 0644 \(digest) a/../x", manifest], "'.' or '..'"),
            (["file 0644 \(digest) a.txt"], "manifest"),
        ] {
            #expect {
                _ = try BundleSignature.parse(text(lines), path: "s")
            } throws: { error in
                "\(error)".contains(reason)
            }
        }
    }

    /// Before: entry paths were split at characters, where a slash with a combining mark after it
    /// (or a prepended mark, U+0600, before it) is no slash, so `x\u{600}/..` had no `..`
    /// component; and directories were a set of strings, where "é" is also "e\u{301}" and the
    /// Kelvin sign "K". Each listing has its entries (after the four header lines) sorted by
    /// bytes; `line` is the one that must be refused.
    @Test("a path that is '.', '..' or empty at a slash byte, or under a directory listed in another spelling, is refused, naming the line",
          arguments: [
              (["dir 0755 x\u{600}", "dir 0755 x\u{600}/.."], 7, "'.' or '..'"),
              (["dir 0755 x\u{600}", "dir 0755 x\u{600}/."], 7, "'.' or '..'"),
              (["dir 0755 x\u{600}", "dir 0755 x\u{600}/"], 7, "empty component"),
              (["file 0644 \(SignatureTests.digest) ../\u{301}x"], 5, "'.' or '..'"),
              (["file 0644 \(SignatureTests.digest) ./\u{301}"], 5, "'.' or '..'"),
              (["dir 0755 a", "file 0644 \(SignatureTests.digest) a//\u{301}"], 6, "empty component"),
              (["dir 0755 e\u{301}", "file 0644 \(SignatureTests.digest) \u{E9}/x"], 7, "its directory \u{E9} is not"),
              (["dir 0755 K", "file 0644 \(SignatureTests.digest) \u{212A}/x"], 7, "its directory \u{212A} is not"),
          ] as [([String], Int, String)])
    func aHiddenDotDotOrAnotherSpellingIsRefused(entries: [String], line: Int, reason: String) {
        // Sorted by the bytes of their paths (the last word), the manifest's among them.
        func path(_ line: String) -> Substring.UTF8View { Substring(line).utf8.split(separator: 0x20).last! }
        let lines = (entries + ["file 0644 \(Self.digest) extension.yaml"]).sorted { path($0).lexicographicallyPrecedes(path($1)) }
        #expect {
            _ = try BundleSignature.parse(Self.listing(lines), path: "/b/extension.signature")
        } throws: { error in
            (error as? CatalogProblem)?.line == line && "\(error)".contains(reason)
        }
    }

    /// A mark after a slash byte starts the next name, which is no ".", ".." or empty one.
    @Test func aNameThatStartsWithACombiningMarkBelowADirectoryIsListed() throws {
        let signature = try BundleSignature.parse(Self.listing([
            "file 0644 \(Self.digest) extension.yaml", "dir 0755 x", "dir 0755 x/\u{301}", "dir 0755 x/\u{301}/\u{301}..",
            "file 0644 \(Self.digest) x\u{600}",
        ]), path: "/b/extension.signature")
        #expect(signature.entries.count == 5)
    }

    /// Before: an entry's line was taken apart at " " characters, and a space followed by a
    /// combining mark (or a zero-width joiner) is one character, no " ": the line of a name that
    /// starts with one ("file 0644 sha256:… \u{301}x") had a field too few, so `sign` wrote a
    /// signature that its own check refused. Each name is a file, a directory (holding a file of
    /// that name) and a symbolic link of a real bundle, signed and then checked.
    @Test("a bundle holding names that start with a combining mark, or have one after a space, signs and verifies",
          arguments: ["\u{301}x", "a \u{301}b", "\u{200D}x", " \u{301}"])
    func aNameWithAMarkAfterASpaceSignsAndVerifies(name: String) throws {
        let world = try ExtensionWorld()
        let path = try world.install(Self.identifier, manifest: manifest(version: "1.0"))
        try world.write(path + "/share/words.txt", "alpha\n")
        let directory = name + ".d"
        try Fixtures.writeFile(path + "/" + name, Array("file".utf8), mode: 0o644)
        #expect(mkdir(path + "/" + directory, 0o755) == 0)
        try Fixtures.writeFile(path + "/" + directory + "/" + name, Array("inside".utf8), mode: 0o600)
        #expect(symlink(name, path + "/" + name + ".link") == 0)
        let key = SigningKey.generate()
        let signed = try BundleSigning.sign(bundleAt: path, with: key)

        guard case .valid(let signature) = try check(path) else { Issue.record("\(try check(path))"); return }
        #expect(signature == signed && signature.signer == key.publicKey)
        func kind(_ path: String) -> String? {
            switch signature.entry(path)?.kind {
            case .file: "file"
            case .directory: "dir"
            case .link: "link"
            case nil: nil
            }
        }
        #expect([name, directory, directory + "/" + name, name + ".link"].map(kind) == ["file", "dir", "file", "link"])
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path + "/" + BundleSignature.fileName)))
        #expect(Array(try BundleSignature.parse(bytes, path: "x").rendered().utf8) == bytes)
    }

    static let digest = ContentHasher.digest(of: [])

    /// A signature file with `entries` (its signature is not checked by parsing).
    static func listing(_ entries: [String]) -> [UInt8] {
        let header = ["extsandbox-signature 1", "identifier org.example.x", "version 1.0", "signer \(SigningKey.generate().publicKey)"]
        return Array((header + entries + ["signature " + String(repeating: "00", count: 64)]).joined(separator: "\n").utf8 + [0x0a])
    }
}
