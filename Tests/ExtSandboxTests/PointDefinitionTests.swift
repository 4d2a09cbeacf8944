import ExtensionCatalog
import ExtSandbox
import Foundation
import Testing
import TestSupport

extension AppExtensionPoint {
    @Definition static var sample: AppExtensionPoint {
        Name("org.example.host.sample")
        UserInterface(true)
        Scope(restriction: .none)
        SecurityLevel("hardened")
    }

    @Definition static var minimal: AppExtensionPoint {
        Name("org.example.host.minimal")
    }
}

/// Points defined in Swift, and the declaration file generated from them.
@Suite("point definitions", .offThePool)
struct PointDefinitionTests {
    @Test func theDefinitionSyntaxSetsEveryPartAndDefaultsTheRest() {
        #expect(AppExtensionPoint.sample == AppExtensionPoint(
            name: "org.example.host.sample", hasUserInterface: true, scope: .init(restriction: .none), securityLevel: "hardened"))
        #expect(AppExtensionPoint.minimal == AppExtensionPoint(name: "org.example.host.minimal"))
        #expect(AppExtensionPoint.minimal.scope.restriction == .application)
        #expect(AppExtensionPoint.minimal.securityLevel == "standard")
    }

    @Test func theDeclarationFileIsGeneratedAndReadsBack() throws {
        let world = try ExtensionWorld()
        let host = AppExtensionHost(identifier: "org.example.host", bundleDirectory: world.hostBundle, locations: world.locations)
        let path = world.points + "/generated.appext"
        try host.writeDeclaration(points: [.sample, .minimal], to: path)
        let file = try PointDeclarationFile.load(path)
        #expect(file.hostIdentifier == "org.example.host")
        #expect(file.bundlePath == world.hostBundle)
        #expect(file.points == [AppExtensionPoint.sample.declaration, AppExtensionPoint.minimal.declaration])
        #expect(file.points[0].restriction == .none && file.points[0].hasUserInterface && file.points[0].securityLevel == "hardened")
    }

    @Test func aDeclarationThatCannotBeWrittenIsADiscoveryErrorNamingTheFile() throws {
        let world = try ExtensionWorld()
        let host = AppExtensionHost(identifier: "org.example.host", bundleDirectory: world.hostBundle, locations: world.locations)
        let path = world.points + "/no-such-directory/generated.appext"
        do {
            try host.writeDeclaration(points: [.sample], to: path)
            Issue.record("a declaration was written into a directory that does not exist")
        } catch .cannotWrite(let file, _) {
            #expect(file.hasPrefix(path + ".tmp-"), "\(file)")
        } catch {
            Issue.record("not cannotWrite: \(error)")
        }
    }

    /// Found by the bundle-manifest fuzz target: a host without points wrote `points:` (a null),
    /// a file its own parser then refused.
    @Test func aDeclarationWithoutPointsReadsBack() throws {
        let file = PointDeclarationFile(hostIdentifier: "org.example.host", points: [])
        #expect(try PointDeclarationFile.parse(file.rendered(), path: "h.appext") == file)
    }

    /// Found by the bundle-manifest fuzz target: a security level holding NEL (U+0085) was
    /// written raw inside quotes, and a YAML reader takes NEL for a line break.
    @Test func lineBreaksOfEveryKindAreEscaped() throws {
        let level = "a\u{85}b\u{2028}c\u{2029}d\u{feff}e\u{9f}\n\t\"\\"
        let file = PointDeclarationFile(
            hostIdentifier: "org.example.host", points: [ExtensionPointDeclaration(name: "org.example.p", securityLevel: level)])
        #expect(try PointDeclarationFile.parse(file.rendered(), path: "h.appext") == file)
    }

    @Test func aBrokenDeclarationFileNamesItsLine() throws {
        let text = "schema: 1\nhost: org.example.host\npoints:\n  - name: org.example.p\n    scope: everywhere\n"
        #expect {
            try PointDeclarationFile.parse(text, path: "h.appext")
        } throws: { error in
            "\(error)" == "h.appext:5: scope must be 'application' or 'none', not 'everywhere'"
        }
    }
}
