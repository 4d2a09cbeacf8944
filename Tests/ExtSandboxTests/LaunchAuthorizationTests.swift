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

    /// Before: identities were compared as strings, so one whose approvals, administrator's file
    /// or container directory was another spelling of the issued one's ("e\u{301}" for "\u{E9}")
    /// passed as issued and shared its running process (with the container there); and a
    /// development identity spelled alike, or with arguments spelled alike, shared the process
    /// started with the other bytes.
    @Test("an identity whose files or arguments are another spelling is another identity, with a process of its own")
    func anotherSpellingIsAnotherIdentity() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        var locations = world.locations
        locations.stateFile = world.root + "/state/\u{E9}"
        locations.systemStateFile = world.root + "/etc/\u{E9}"
        locations.containerDirectory = world.root + "/containers-\u{E9}"
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      securityLevel: TestPaths.policiesDirectory + "/standard.yaml")
        let monitor = try await AppExtensionPoint.Monitor(
            points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: locations))
        defer { monitor.cancel() }
        let issued = try #require(monitor.identities.first)
        guard case .discovered(let discovered) = issued.origin else { Issue.record("\(issued) was not discovered"); return }
        func respelled(_ text: String) -> String { text.replacing("\u{E9}", with: "e\u{301}") }
        func identity(_ executablePath: String, _ arguments: [String], _ origin: IdentityOrigin) -> AppExtensionIdentity {
            AppExtensionIdentity(
                bundleIdentifier: issued.bundleIdentifier, displayName: issued.displayName, version: issued.version, point: issued.point,
                hostIdentifier: issued.hostIdentifier, executablePath: executablePath, arguments: arguments, origin: origin)
        }
        #expect(identity(issued.executablePath, issued.arguments, issued.origin) == issued)
        for field in [\.stateFile, \.systemStateFile, \.containerDirectory] as [WritableKeyPath<DiscoveredExtension, String>] {
            var other = discovered
            other[keyPath: field] = respelled(discovered[keyPath: field])
            #expect(!other[keyPath: field].utf8.elementsEqual(discovered[keyPath: field].utf8))
            let edited = identity(issued.executablePath, issued.arguments, .discovered(other))
            #expect(edited != issued, "\(field)")
            #expect(Set([edited, issued]).count == 2, "\(field)")
            #expect(throws: ExtensionError.self, "\(field)") { try LaunchAuthorization.checkProvenance(edited) }
            #expect(try ProcessReuseKey(identity: edited) != ProcessReuseKey(identity: issued), "\(field)")
        }

        // Two names of one executable (so one file as the kernel sees it), and arguments.
        let directory = world.root + "/bin"
        #expect(mkdir(directory, 0o755) == 0)
        for name in ["\u{E9}", "e\u{301}"] { #expect(symlink(HostFixtures.productsDirectory + "/xsb-echo-extension", directory + "/" + name) == 0) }
        func development(_ name: String, _ argument: String) -> AppExtensionIdentity {
            .developmentOnly(bundleIdentifier: "org.example.dev", executablePath: directory + "/" + name, point: point, arguments: [argument])
        }
        let started = development("\u{E9}", "\u{E9}")
        for edited in [development("e\u{301}", "\u{E9}"), development("\u{E9}", "e\u{301}")] {
            #expect(edited != started, "\(edited.executablePath) \(edited.arguments)")
            #expect(try ProcessReuseKey(identity: edited) != ProcessReuseKey(identity: started), "\(edited.executablePath) \(edited.arguments)")
        }

        // The point's security level (a policy's path) and shared container, spelled alike.
        func pointed(_ level: String, _ shared: String?) -> AppExtensionIdentity {
            var point = point
            point.securityLevel = level
            point.sharedContainer = shared
            return .developmentOnly(bundleIdentifier: "org.example.dev", executablePath: directory + "/\u{E9}", point: point)
        }
        let pairs = [(pointed("/p/\u{E9}.yaml", nil), pointed("/p/e\u{301}.yaml", nil)), (pointed("standard", "K"), pointed("standard", "\u{212A}"))]
        for (first, second) in pairs {
            #expect(first != second, "\(first.point)")
            #expect(Set([first, second]).count == 2, "\(first.point)")
        }
    }
}
