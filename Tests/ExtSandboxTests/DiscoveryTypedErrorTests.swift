import ExtensionCatalog
import Foundation
import Glibc
import Testing
import TestSupport
@testable import ExtSandbox

/// The discovery monitor's initializers and `sharedContainer(named:)` declare what they throw
/// (`throws(DiscoveryError)`): a caller switches over the cases, with no cast. The `catch`
/// blocks below bind `error` as a `DiscoveryError` (a plain `catch` and a `switch`: the compiler
/// crashes on some `catch let … as` forms in typed do-blocks), so they compile only while the
/// type is declared.
@Suite("Typed errors of discovery and containers")
struct DiscoveryTypedErrorTests {
    static let open = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                        securityLevel: TestPaths.policiesDirectory + "/standard.yaml")

    @Test("each of the monitor's initializers throws DiscoveryError.catalog for a broken approvals file, naming the file and line")
    func monitorInitializersThrowDiscoveryError() async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.bundled", in: world.hostBundle + "/Extensions")
        try world.write(world.stateFile, "not an approvals file\n")
        let host = AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
        let initializers: [(String, @Sendable () async throws(DiscoveryError) -> AppExtensionPoint.Monitor)] = [
            ("init(points:host:)", { () async throws(DiscoveryError) in try await AppExtensionPoint.Monitor(points: [Self.open], host: host) }),
            ("init(appExtensionPoint:host:)", { () async throws(DiscoveryError) in try await AppExtensionPoint.Monitor(appExtensionPoint: Self.open, host: host) }),
            ("init(_:host:)", { () async throws(DiscoveryError) in try await AppExtensionPoint.Monitor(Self.open, host: host) }),
        ]
        for (name, make) in initializers {
            do {
                let monitor = try await make()
                monitor.cancel()
                Issue.record("\(name) accepted a broken approvals file")
            } catch {
                let typed: DiscoveryError = error
                switch typed {
                case .catalog(let problem):
                    #expect(problem.file == world.stateFile, "\(name): \(problem)")
                    #expect(problem.line == 1, "\(name): \(problem)")
                default:
                    Issue.record("\(name): not the approvals file's problem: \(typed)")
                }
            }
        }
    }

    @Test("sharedContainer(named:) throws DiscoveryError.catalog for a name that could leave the containers' directory, and makes nothing")
    func sharedContainerThrowsDiscoveryError() throws {
        let world = try ExtensionWorld()
        let host = AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
        for name in ["../escape", ".hidden", "a/b", ""] {
            do {
                let path = try host.sharedContainer(named: name)
                Issue.record("the shared container \(name.debugDescription) was made at \(path)")
            } catch {
                let typed: DiscoveryError = error
                switch typed {
                case .catalog(let problem):
                    #expect(problem.kind == .inconsistent, "\(problem)")
                    #expect(problem.reason.contains("shared container name"), "\(problem)")
                default:
                    Issue.record("not the name's problem: \(typed)")
                }
            }
        }
        #expect(!FileManager.default.fileExists(atPath: world.locations.containers.directory + "/escape"))
    }
}
