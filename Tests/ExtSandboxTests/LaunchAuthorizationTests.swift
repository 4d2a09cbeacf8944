import ExtensionCatalog
import Glibc
import Testing
import TestSupport
import ExtSandbox

/// Issue 12's typed errors: a discovered extension whose bundle is no longer valid at its launch
/// is refused with the catalog's typed ``CatalogProblem`` (``DiscoveryError/catalog(_:)``: the
/// file, the kind), not a sentence in ``DiscoveryError/refused(identifier:reason:)``.
@Suite("Launch authorization's typed refusals")
struct LaunchAuthorizationTests {
    @Test("a bundle made unsafe after discovery is refused with its CatalogProblem, naming the manifest")
    func unsafeBundleKeepsTheCatalogProblem() async throws {
        let world = try ExtensionWorld()
        let bundle = try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      securityLevel: TestPaths.policiesDirectory + "/standard.yaml")
        let monitor = try await AppExtensionPoint.Monitor(
            points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations))
        let identity = try #require(monitor.identities.first)
        // Group-writable after discovery: it could change between the check and the launch.
        let manifest = bundle + "/extension.yaml"
        #expect(chmod(manifest, 0o664) == 0)
        // (A handle that were made anyway is invalidated when the expectation drops it.)
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            guard case DiscoveryError.catalog(let problem) = error else { return false }
            return problem.kind == .unsafe && problem.file == manifest
        }
    }
}
