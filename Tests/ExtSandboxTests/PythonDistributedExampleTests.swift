import ExtSandbox
import Foundation
import Testing
import TestSupport
import TextFilterContract

/// Examples/python-textfilter: a distributed method served in Python from the document alone,
/// called by a Swift host through its `@Resolvable` proxy.
@Suite("Python example serving a distributed method")
struct PythonDistributedExampleTests {
    init() {
        TextFilterContract.register()
    }

    static let script: String = {
        let path = TestPaths.packageRoot.appendingPathComponent("Examples/python-textfilter/extension.py").path
        return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }()

    @Test("the Swift proxy calls the Python method: a result, a registered error, an unknown method")
    func pythonServesApply() async throws {
        try #require(!Self.script.isEmpty)
        let identity = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "python-textfilter-\(UUID().uuidString)", executablePath: "/usr/bin/python3",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: HostFixtures.policiesDirectory + "/standard.yaml"),
            arguments: ["-c", Self.script])
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        let filter = try connection.remoteObject($TextFilter.self)
        #expect(try await filter.apply("hello", options: FilterOptions()) == "HELLO")
        #expect(try await filter.apply("as is", options: FilterOptions(shout: false)) == "as is")
        await #expect(throws: FilterError.tooLong(limit: 2)) { _ = try await filter.apply("hello", options: FilterOptions(limit: 2)) }
        await #expect {
            _ = try await filter.cancelledSleeps()
        } throws: { error in
            guard case DistributedCallError.unknownMethod = error else { return false }
            return true
        }
        #expect(try await filter.apply("still", options: FilterOptions()) == "STILL")
    }
}
