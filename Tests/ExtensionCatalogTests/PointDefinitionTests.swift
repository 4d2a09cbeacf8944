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
@Suite("point definitions")
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

    /// Found by the bundle-manifest fuzz target: a host without points wrote `points:` (a null),
    /// a file its own parser then refused.
    @Test func aDeclarationWithoutPointsReadsBack() throws {
        let file = PointDeclarationFile(hostIdentifier: "org.example.host", points: [])
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
