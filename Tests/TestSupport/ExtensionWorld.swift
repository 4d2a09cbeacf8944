import ExtensionCatalog
import Foundation
import Glibc

/// A throw-away world of extension locations: a host bundle with its `Extensions/`, an external
/// directory, a points directory with the host's declaration, and an approvals file.
public final class ExtensionWorld: @unchecked Sendable {
    public let root: String
    public let hostBundle: String
    public let external: String
    public let points: String
    public let stateFile: String
    /// The administrator's file for this world (`$EXTSANDBOX_SYSTEM_APPROVALS`).
    public let systemStateFile: String
    /// Where the world's extensions' containers are (made on first use).
    public let containers: String
    public static let hostIdentifier = "org.example.host"
    public static let openPoint = "org.example.host.text"
    public static let appOnlyPoint = "org.example.host.private"

    public init() throws {
        var template = Array("/tmp/xsb-discovery-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { throw POSIXError(.EIO) }
        root = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        chmod(root, 0o755)
        hostBundle = root + "/host"
        external = root + "/extensions"
        points = root + "/points"
        stateFile = root + "/state/approvals"
        systemStateFile = root + "/etc/approvals"
        containers = root + "/containers"
        for dir in [hostBundle + "/Extensions", external, points] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        }
        let declaration = PointDeclarationFile(hostIdentifier: Self.hostIdentifier, bundlePath: hostBundle, points: [
            ExtensionPointDeclaration(name: Self.openPoint, restriction: .none, securityLevel: "standard"),
            ExtensionPointDeclaration(name: Self.appOnlyPoint, restriction: .application, securityLevel: "hardened"),
        ])
        try write(points + "/host.appext", declaration.rendered())
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    public var locations: ExtensionLocations {
        ExtensionLocations(hostBundle: hostBundle, external: [external], pointDirectories: [points], stateFile: stateFile,
                           systemStateFile: systemStateFile, containerDirectory: containers)
    }

    public var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["EXTSANDBOX_EXTENSION_DIRS"] = external
        environment["EXTSANDBOX_POINT_DIRS"] = points
        environment["EXTSANDBOX_STATE_FILE"] = stateFile
        environment["EXTSANDBOX_SYSTEM_APPROVALS"] = systemStateFile
        environment["EXTSANDBOX_CONTAINER_DIR"] = containers
        return environment
    }

    public func write(_ path: String, _ text: String, mode: mode_t = 0o644) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Fixtures.writeFile(path, Array(text.utf8), mode: mode)
    }

    /// Builds a bundle in `directory` named `<last part of identifier>.appex`, with a shell script
    /// as its executable (or `executableSource` copied in), and returns its path.
    @discardableResult
    public func install(_ identifier: String, point: String = ExtensionWorld.openPoint, in directory: String? = nil,
                 manifest: String? = nil, executableSource: String? = nil, script: String = "exit 0",
                 viaRename: Bool = false) throws -> String {
        let directory = directory ?? external
        let name = identifier.split(separator: ".").last.map(String.init)! + ".appex"
        let final = directory + "/" + name
        let build = viaRename ? directory + "/." + name + ".partial" : final
        try FileManager.default.createDirectory(atPath: build, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try write(build + "/extension.yaml", manifest ?? """
            schema: 1
            identifier: \(identifier)
            name: \(identifier) display
            version: "1.0"
            point: \(point)
            executable: bin/run
            """)
        if let executableSource {
            try FileManager.default.createDirectory(atPath: build + "/bin", withIntermediateDirectories: true)
            let bytes = try Data(contentsOf: URL(fileURLWithPath: executableSource))
            try Fixtures.writeFile(build + "/bin/run", Array(bytes), mode: 0o755)
        } else {
            try write(build + "/bin/run", "#!/bin/sh\n\(script)\n", mode: 0o755)
        }
        if viaRename { rename(build, final) }
        return final
    }

    /// Replaces the bundle's executable the way installers do (new file, rename over).
    public func replaceExecutable(of bundle: String, script: String = "exit 1") throws {
        try write(bundle + "/bin/.run.new", "#!/bin/sh\n\(script)\n", mode: 0o755)
        rename(bundle + "/bin/.run.new", bundle + "/bin/run")
    }

    public typealias Output = Fixtures.Output


    /// Runs the built `extsandbox` with this world's locations (suspending meanwhile, see
    /// ``Fixtures/run(_:as:environment:standardInput:)``).
    public func cli(_ arguments: [String]) async throws -> Output {
        try await start(arguments).output()
    }

    /// Starts the built `extsandbox` with this world's locations; ``StartedProcess/output()``
    /// waits for it. (Starting several first and then waiting runs them concurrently.)
    public func start(_ arguments: [String]) throws -> StartedProcess {
        try Fixtures.start([TestPaths.cli] + arguments, environment: environment)
    }

    /// `extsandbox list --all --json`, as identifier → state.
    public func states() async throws -> [String: String] {
        let output = try await cli(["list", "--all", "--json"])
        guard output.status == 0 else { throw CLIFailure(output: output.stderr) }
        let rows = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [[String: Any]] ?? []
        var states: [String: String] = [:]
        for row in rows { states[row["identifier"] as? String ?? row["path"] as! String] = row["state"] as? String }
        return states
    }

    public struct CLIFailure: Error {
        public var output: String
        public init(output: String) { self.output = output }
    }
}
