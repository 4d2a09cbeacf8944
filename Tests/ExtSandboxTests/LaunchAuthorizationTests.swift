import ExtensionCatalog
import Glibc
import Testing
import TestSupport
@testable import ExtSandbox

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
            guard case ExtensionError.discovery(.catalog(let problem)) = error else { return false }
            return problem.kind == .unsafe && problem.file == manifest
        }
    }

    /// What a monitor issued is what launches, every field of it: an identity edited in memory
    /// (here through the package's own initializer) with a stricter or laxer security level, or
    /// another host's identifier (which the extension would see as its host), is refused.
    @Test("an identity edited after discovery is refused, whatever field changed")
    func editedIdentityIsRefused() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      securityLevel: TestPaths.policiesDirectory + "/standard.yaml")
        let monitor = try await AppExtensionPoint.Monitor(
            points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations))
        defer { monitor.cancel() }
        let issued = try #require(monitor.identities.first)
        func edited(level: String? = nil, host: String? = nil, version: String? = nil) -> AppExtensionIdentity {
            AppExtensionIdentity(
                bundleIdentifier: issued.bundleIdentifier, displayName: issued.displayName, version: version ?? issued.version,
                point: AppExtensionPoint(name: point.name, scope: point.scope, securityLevel: level ?? point.securityLevel),
                hostIdentifier: host ?? issued.hostIdentifier, executablePath: issued.executablePath,
                arguments: issued.arguments, origin: issued.origin)
        }
        for identity in [edited(level: TestPaths.policiesDirectory + "/restricted.yaml"), edited(level: "hardened"),
                         edited(host: "org.example.other-host"), edited(version: "9.9")] {
            await #expect {
                _ = try await AppExtensionProcess(configuration: .init(identity: identity))
            } throws: { error in
                guard case ExtensionError.discovery(.notDiscovered(let identifier)) = error else { return false }
                return identifier == issued.bundleIdentifier
            }
        }
    }
}
