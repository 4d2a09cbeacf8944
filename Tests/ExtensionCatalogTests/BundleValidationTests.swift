@testable import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport

/// Broken, inconsistent and unsafe bundles are reported with the file, line and reason.
@Suite("bundle validation", .offThePool)
struct BundleValidationTests {
    func problem(_ world: ExtensionWorld, _ bundle: String, knownPoint: ((String) -> Bool)? = nil) throws -> CatalogProblem {
        switch BundleValidator.validate(bundleAt: bundle, knownPoint: knownPoint) {
        case .success: throw ExtensionWorld.CLIFailure(output: "\(bundle) was accepted")
        case .failure(let problem): return problem
        }
    }

    @Test func aValidBundle() throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.good")
        let bundle = try BundleValidator.validate(bundleAt: path).get()
        #expect(bundle.manifest.identifier == "org.example.good")
        #expect(bundle.manifest.displayName == "org.example.good display")
        #expect(bundle.executablePath == (path as NSString).resolvingSymlinksInPath + "/bin/run")
    }

    @Test("broken manifests name the file, the line and the reason", arguments: [
        ("schema: 1\nidentifier: [oops\n", 3, "not valid YAML"),
        ("schema: 2\nidentifier: org.example.x\n", 1, "schema 2 is not supported"),
        ("schema: 1\nidentifier: org.example.x\nname: X\nversion: 1\npoint: org.example.p\n", 1, "missing 'executable'"),
        ("schema: 1\nidentifier: org.example.x\nname: X\nversion: 1\npoint: org.example.p\nexecutable: run\ncolour: red\n", 7, "unknown field 'colour'"),
        ("schema: 1\nidentifier: not-dns\nname: X\nversion: 1\npoint: org.example.p\nexecutable: run\n", 2, "not a reverse-DNS name"),
        ("", 1, "empty"),
    ])
    func broken(manifest: String, line: Int, reason: String) throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.broken", manifest: manifest)
        let problem = try problem(world, path)
        #expect(problem.kind == .broken)
        #expect(problem.file == path + "/extension.yaml")
        #expect(problem.line == line, "\(problem)")
        #expect(problem.description.contains(reason), "\(problem)")
        #expect(problem.description.hasPrefix(path + "/extension.yaml:\(line): "), "\(problem)")
    }

    /// Before: the bytes became U+FFFD and the manifest was accepted (YAML requires Unicode).
    @Test("a manifest or declaration file with bytes that are not UTF-8 is broken at their line", arguments: [
        (Array("schema: 1\nidentifier: org.example.bytes\nname: ab".utf8) + [0xFF, 0xFE]
            + Array("cd\nversion: \"1\"\npoint: org.example.host.text\nexecutable: bin/run\n".utf8), 3),
        ([0xFF, 0xFE] + Array("schema: 1\n".utf8), 1),  // a UTF-16 byte-order mark is not taken for one
    ] as [([UInt8], Int)])
    func notUTF8(bytes: [UInt8], line: Int) throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.bytes")
        try Fixtures.writeFile(path + "/extension.yaml", bytes, mode: 0o644)
        let problem = try problem(world, path)
        #expect(problem.kind == .broken)
        #expect(problem.description.hasPrefix(path + "/extension.yaml:\(line): not valid YAML: invalid leading UTF-8 octet 0xFF: the file is not UTF-8 text"), "\(problem)")
        try Fixtures.writeFile(world.points + "/host.appext", bytes, mode: 0o644)
        #expect {
            try PointDeclarationFile.load(world.points + "/host.appext")
        } throws: { error in
            "\(error)".hasPrefix(world.points + "/host.appext:\(line): not valid YAML: invalid leading UTF-8 octet")
        }
    }

    /// Before: the name's end was compared as characters, and a prepended mark (U+0600) makes
    /// one character with the dot after it, so the file was not read.
    @Test func aDeclarationFileWhoseNameEndsInAppextByItsBytesIsRead() throws {
        let world = try ExtensionWorld()
        let declaration = PointDeclarationFile(hostIdentifier: "org.example.other", points: [
            ExtensionPointDeclaration(name: "org.example.other.point", securityLevel: "standard"),
        ])
        try world.write(world.points + "/x\u{600}.appext", declaration.rendered())
        let (files, problems) = ExtensionCatalog.declarations(in: [world.points])
        #expect(problems.isEmpty, "\(problems)")
        #expect(Set(files.map(\.hostIdentifier)) == [ExtensionWorld.hostIdentifier, "org.example.other"])
    }

    /// Before: a declaration file's bundle was compared with the host's as strings, so a host
    /// whose bundle is another spelling of the declared one ("\u{E9}" for "e\u{301}") was given
    /// its points.
    @Test func pointsDeclaredForABundleAreNotAnotherSpellingsOfIt() throws {
        let world = try ExtensionWorld()
        let declaration = PointDeclarationFile(hostIdentifier: "org.example.other", bundlePath: world.root + "/e\u{301}", points: [
            ExtensionPointDeclaration(name: "org.example.other.point", securityLevel: "standard"),
        ])
        try world.write(world.points + "/other.appext", declaration.rendered())
        #expect(ExtensionCatalog.declaredPoints(host: "org.example.third", bundle: world.root + "/e\u{301}", in: [world.points]) == ["org.example.other.point"])
        #expect(ExtensionCatalog.declaredPoints(host: "org.example.third", bundle: world.root + "/\u{E9}", in: [world.points]).isEmpty)
    }

    /// Before: listed as "cannot stat" (the name, decoded with U+FFFD, named nothing on disk).
    @Test func aBundleDirectoryNameThatIsNotUTF8IsInvalidAndSaysSo() async throws {
        let world = try ExtensionWorld()
        let good = try world.install("org.example.good")
        // caf\xFF.appex: a copy of a valid bundle under a name that is not UTF-8.
        let name: [UInt8] = Array("caf".utf8) + [0xFF] + Array(".appex".utf8)
        let raw = Array(world.external.utf8) + [0x2f] + name + [0]
        try #require(raw.withUnsafeBufferPointer { rename(good, UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) } == 0)
        let shown = world.external + "/caf\\xFF.appex"
        let entries = ExtensionCatalog.scan(world.locations, bundledPoints: [])
        #expect(entries.map(\.path) == [shown])
        guard case .failure(let problem)? = entries.first?.bundle else { Issue.record("accepted: \(entries)"); return }
        #expect(problem.kind == .broken)
        #expect(problem.description == shown + ": the bundle directory's name is not UTF-8 (bytes that are not are shown as \\xNN): a bundle's name must be valid UTF-8; rename it")
        let list = try await world.cli(["list", "--all"])
        #expect(list.stdout.contains("name is not UTF-8") && !list.stdout.contains("cannot stat"), "\(list.stdout)\(list.stderr)")
        #expect(ExtensionCatalog.showingInvalidBytes(Array("é".utf8) + [0xE2, 0x82] + Array("x".utf8)) == "é\\xE2\\x82x")
    }

    /// The launch-time recheck of a bundle removed since discovery says so (see MonitorTests).
    @Test func aBundleThatIsGoneIsNotInstalled() throws {
        let world = try ExtensionWorld()
        let problem = try problem(world, world.external + "/gone.appex")
        #expect(problem.kind == .notInstalled)
        #expect(problem.description == world.external + "/gone.appex: not installed: the bundle directory does not exist (removed?)")
    }

    /// Resources are bound noexec, so a script whose `#!` names one can never run: invalid at
    /// the executable's first line. Before: valid, and every launch failed.
    @Test("a #! script whose interpreter is a bundle resource is invalid at its first line", arguments: [
        ("#!/extension/share/interp\n", "/extension/share/interp"),
        ("#! \t/extension/bin/python3 -u\nprint(1)\n", "/extension/bin/python3"),
        ("#!/extension", "/extension"),
        ("#!/./extension//x/../y", "/./extension//x/../y"),
        ("#!/usr/../extension/y\n", "/usr/../extension/y"),
    ])
    func anInterpreterInTheResources(script: String, interpreter: String) throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.script", manifest: manifest(executable: "bin/run", resources: "resources: [share/interp]\n"))
        try world.write(path + "/share/interp", "#!/bin/sh\n", mode: 0o755)
        try world.write(path + "/bin/run", script, mode: 0o755)
        let problem = try problem(world, path)
        #expect(problem.kind == .inconsistent)
        #expect(problem.description == path + "/bin/run:1: the executable's interpreter \(interpreter) is a bundle resource; resources are data, mounted noexec, so it can never run")
    }

    @Test("other interpreters, and executables without #!, are left alone", arguments: [
        "#!/bin/sh\nexec /extension/share/interp\n", "#!/extensions/x\n", "#!/extension/../usr/bin/env sh\n", "#!\n", "echo no interpreter\n",
    ])
    func otherInterpreters(script: String) throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.script")
        try world.write(path + "/bin/run", script, mode: 0o755)
        #expect(throws: Never.self) { try BundleValidator.validate(bundleAt: path).get() }
    }

    /// Before: the interpreter's path was split at characters, where a slash with a combining
    /// mark after it (or a prepended mark, U+0600, before it) is no slash, so `..` took away
    /// another component than the kernel's.
    @Test("an interpreter's path is split at slash bytes, as the kernel splits it", arguments: [
        ("/extension/\u{301}/../share/interp", true),
        ("/x\u{600}/../extension/share/interp", true),
        ("/extension/x/\u{301}/../../share/interp", true),
        ("/extension/x\u{600}/../../bin/sh", false),
    ])
    func anInterpreterSplitAtSlashBytes(interpreter: String, isResource: Bool) throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.script")
        try world.write(path + "/bin/run", "#!\(interpreter)\n", mode: 0o755)
        switch BundleValidator.validate(bundleAt: path) {
        case .success:
            #expect(!isResource, "\(interpreter.unicodeScalars.map(\.value)) was not taken for a resource")
        case .failure(let problem):
            #expect(isResource && problem.reason.contains("is a bundle resource"), "\(problem)")
        }
    }

    func manifest(executable: String, resources: String = "") -> String {
        "schema: 1\nidentifier: org.example.x\nname: X\nversion: \"1\"\npoint: org.example.host.text\nexecutable: \(executable)\n\(resources)"
    }

    @Test func anExecutableOutsideTheBundle() throws {
        let world = try ExtensionWorld()
        for executable in ["../outside", "/bin/sh", "bin/../../x"] {
            let path = try world.install("org.example.outside", manifest: manifest(executable: executable))
            let problem = try problem(world, path)
            #expect(problem.kind == .inconsistent)
            #expect(problem.line == 6)
            #expect(problem.reason.contains("\(executable) is outside the bundle"), "\(problem)")
        }
    }

    @Test("a resource linked into a sibling whose name is another spelling of the bundle's is outside it")
    func aLinkIntoASiblingSpelledAlike() throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.Key", manifest: manifest(executable: "bin/run", resources: "resources:\n  - data\n"))
        // The Kelvin sign (U+212A) is canonically "K": as Swift strings the two directories are
        // one path, as file names two.
        let sibling = world.external + "/\u{212A}ey.appex"
        try FileManager.default.createDirectory(atPath: sibling + "/data", withIntermediateDirectories: true)
        symlink("../\u{212A}ey.appex/data", path + "/data")
        let problem = try problem(world, path)
        #expect(problem.reason.contains("resource data is a symbolic link out of the bundle"), "\(problem)")
    }

    /// Before: compared as Swift strings, a bundle found again at another spelling of its paths
    /// (the Kelvin sign for "K") was taken for the bundle discovered, which a launch checks.
    @Test("a validated bundle whose paths are another spelling is another bundle")
    func anotherSpellingIsAnotherBundle() throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.Key", manifest: manifest(executable: "bin/run", resources: "resources:\n  - data\n"))
        try FileManager.default.createDirectory(atPath: path + "/data", withIntermediateDirectories: true)
        let bundle = try BundleValidator.validate(bundleAt: path).get()
        func respelled(_ text: String) -> String { text.replacing("/Key.appex", with: "/\u{212A}ey.appex") }
        for field in [\.path, \.realPath, \.manifestPath, \.executablePath] as [WritableKeyPath<ValidatedBundle, String>] {
            var other = bundle
            other[keyPath: field] = respelled(bundle[keyPath: field])
            #expect(!other[keyPath: field].utf8.elementsEqual(bundle[keyPath: field].utf8))
            #expect(other != bundle, "\(field)")
        }
        var other = bundle
        other.resources = bundle.resources.map { ($0.relative, respelled($0.real)) }
        #expect(other.resources.count == 1)
        #expect(other != bundle, "resources")
    }

    @Test func aSymbolicLinkOutOfTheBundle() throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.link", manifest: manifest(executable: "bin/link"))
        symlink("/bin/sh", path + "/bin/link")
        let problem = try problem(world, path)
        #expect(problem.kind == .inconsistent)
        #expect(problem.line == 6)
        #expect(problem.reason.contains("bin/link is a symbolic link out of the bundle"), "\(problem)")

        // A resource that links out is refused the same way.
        let other = try world.install("org.example.res", manifest: manifest(executable: "bin/run", resources: "resources:\n  - data\n"))
        symlink("/etc", other + "/data")
        let resource = try self.problem(world, other)
        #expect(resource.line == 8)
        #expect(resource.reason.contains("resource data is a symbolic link out of the bundle"), "\(resource)")

        // The bundle itself may not be a link to elsewhere.
        symlink(other, world.external + "/alias.appex")
        #expect(try self.problem(world, world.external + "/alias.appex").reason.contains("the bundle is a symbolic link"))
    }

    @Test func aPointTheHostDoesNotDefine() throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.stray", point: "org.example.other.point", in: world.hostBundle + "/Extensions")
        let problem = try problem(world, path) { $0 == ExtensionWorld.openPoint }
        #expect(problem.kind == .inconsistent)
        #expect(problem.line == 5)
        #expect(problem.reason.contains("unknown point org.example.other.point"), "\(problem)")
    }

    @Test("unsafe: the executable, the manifest or the bundle writable by others", arguments: [
        ("bin/run", mode_t(0o775), "the executable is writable by its group"),
        ("bin/run", mode_t(0o757), "the executable is writable by everyone"),
        ("extension.yaml", mode_t(0o646), "the manifest is writable by everyone"),
        ("", mode_t(0o777), "the bundle directory is writable by everyone"),
    ])
    func unsafe(file: String, mode: mode_t, reason: String) throws {
        let world = try ExtensionWorld()
        let path = try world.install("org.example.unsafe")
        chmod(file.isEmpty ? path : path + "/" + file, mode)
        let problem = try problem(world, path)
        #expect(problem.kind == .unsafe)
        #expect(problem.reason.contains(reason), "\(problem)")
        #expect(problem.reason.contains("only its owner and root may write it"))
    }

    @Test func aDuplicateIdentifierIsInvalidWhereverItIsNotFirst() throws {
        let world = try ExtensionWorld()
        try world.install("org.example.twin", in: world.hostBundle + "/Extensions")
        let second = try world.install("org.example.twin")
        let entries = ExtensionCatalog.scan(world.locations, bundledPoints: [ExtensionWorld.openPoint])
        let failed = try #require(entries.first { $0.path == second })
        guard case .failure(let problem) = failed.bundle else { Issue.record("the duplicate was accepted"); return }
        #expect(problem.reason.contains("already installed at \(world.hostBundle)/Extensions/twin.appex"))
    }

    /// Before: a location's names were sorted as strings, where two spellings of one name are
    /// equal, so which of two such bundles took their identifier (the other one invalid) was the
    /// directory's order: the order they were made in, or their names' hashes. Each spelling is
    /// a bundle of the same identifier, made in one order in a world and in the other in a second
    /// world; in both, the name first by its bytes is the one found first.
    @Test("of bundles named in spellings of one name, with one identifier, the first by bytes takes it whatever the order they came in",
          arguments: [["\u{E9}", "e\u{301}"], ["\u{212A}ey", "Key"], ["\u{C5}", "A\u{30A}", "\u{212B}"], ["s\u{323}\u{307}", "s\u{307}\u{323}", "\u{1E69}"]])
    func spellingsOfOneNameAreFoundInByteOrder(spellings: [String]) throws {
        let first = spellings.min { $0.utf8.lexicographicallyPrecedes($1.utf8) }! + ".appex"
        for order in [spellings, Array(spellings.reversed())] {
            let world = try ExtensionWorld()
            for (index, spelling) in order.enumerated() {
                let built = try world.install("org.example.twin", in: world.root + "/build-\(index)")
                #expect(rename(built, world.external + "/" + spelling + ".appex") == 0)
            }
            let entries = ExtensionCatalog.scan(world.locations, bundledPoints: [])
            #expect(entries.count == spellings.count)
            let found = entries.filter { if case .success = $0.bundle { true } else { false } }.map(\.path)
            #expect(found.count == 1 && found.allSatisfy { $0.utf8.elementsEqual((world.external + "/" + first).utf8) },
                    "\(order.map { Array($0.utf8) }) made in this order: \(found.map { Array($0.utf8) }) found first")
        }
    }
}

@Suite("Extension locations")
struct ExtensionLocationsTests {
    /// Before: the lists were cut at ":" characters, and a colon that a combining mark follows
    /// is one character with it, so two directories were taken for one.
    @Test("the environment's directory lists are cut at colon bytes")
    func listsCutAtColonBytes() {
        let locations = ExtensionLocations.standard(
            hostBundle: nil, environment: ["EXTSANDBOX_EXTENSION_DIRS": "/a:\u{301}b", "EXTSANDBOX_POINT_DIRS": "/p::\u{301}q:"])
        #expect(locations.external.map { Array($0.utf8) } == [Array("/a".utf8), Array("\u{301}b".utf8)])
        #expect(locations.pointDirectories.map { Array($0.utf8) } == [Array("/p".utf8), Array("\u{301}q".utf8)])
    }
}
