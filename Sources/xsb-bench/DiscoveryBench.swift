import ExtSandbox
import ExtensionCatalog
import Foundation
import Glibc

/// Discovery: how long a monitor takes to start over many installed bundles, and how long an
/// install takes to reach a running monitor (report-only: no target).
///
/// - `discovery_snapshot_ms_1000`: `AppExtensionPoint.Monitor` start (scan, validate, read the
///   approvals, hash what is approved, set up the watches) over 1,000 installed bundles, all
///   approved; median of 5 starts (the first, with nothing hashed yet, is reported as `_cold`).
/// - `discovery_update_ms`: a bundle renamed into an external directory → the monitor's update
///   (inotify, the 10 ms debounce, the rescan of that directory); median of 20 installs.
struct DiscoveryBench {
    struct Results {
        var snapshotCold: Double
        var snapshot: Double
        var update: Double
        var updates: Int
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    let root: String

    init() throws {
        var template = Array("/tmp/xsb-bench-discovery-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { throw POSIXError(.EIO) }
        root = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func install(_ index: Int, in directory: String, tag: String = "b") throws {
        let name = "\(tag)\(index)"
        let staging = directory + "/.\(name).partial"
        try FileManager.default.createDirectory(atPath: staging + "/bin", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o755])
        try "schema: 1\nidentifier: org.bench.\(name)\nname: \(name)\nversion: \"1\"\npoint: org.bench.point\nexecutable: bin/run\n"
            .write(toFile: staging + "/extension.yaml", atomically: false, encoding: .utf8)
        try "#!/bin/sh\necho \(name)\n".write(toFile: staging + "/bin/run", atomically: false, encoding: .utf8)
        chmod(staging + "/bin/run", 0o755)
        chmod(staging + "/extension.yaml", 0o644)
        guard rename(staging, directory + "/\(name).appex") == 0 else { throw POSIXError(.EIO) }
    }

    func run() async throws -> Results {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let external = root + "/extensions", state = root + "/approvals"
        try FileManager.default.createDirectory(atPath: external, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try FileManager.default.createDirectory(atPath: root + "/host/Extensions", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o755])
        chmod(root, 0o755)
        for index in 0..<1000 { try install(index, in: external) }
        var approvals = ApprovalState()
        for index in 0..<1000 {
            let bundle = try BundleValidator.validate(bundleAt: external + "/b\(index).appex").get()
            approvals.approvals[bundle.manifest.identifier] = ApprovalState.Approval(
                executable: ContentDigest(bytes: [UInt8](repeating: 0, count: 32)), manifest: ContentDigest(bytes: [UInt8](repeating: 0, count: 32)))
        }
        // Real digests, computed by a hasher of its own (the monitor's cache stays cold).
        let hasher = ContentHasher()
        for index in 0..<1000 {
            let bundle = try BundleValidator.validate(bundleAt: external + "/b\(index).appex").get()
            approvals.approvals[bundle.manifest.identifier] = try ExtensionCatalog.currentApproval(of: bundle, hasher: hasher)
        }
        try ApprovalStore(path: state).update { $0 = approvals }
        let locations = ExtensionLocations(hostBundle: root + "/host", external: [external], pointDirectories: [], stateFile: state)
        let host = AppExtensionHost(identifier: "org.bench.host", locations: locations)
        let point = AppExtensionPoint(name: "org.bench.point", scope: .init(restriction: .none))

        var starts: [Double] = []
        for _ in 0..<6 {
            let start = Self.now()
            let monitor = try await AppExtensionPoint.Monitor(points: [point], host: host)
            starts.append(Self.now() - start)
            guard monitor.identities.count == 1000 else { fatalError("discovery bench: \(monitor.identities.count) of 1000 found") }
            monitor.cancel()
        }

        // Updates: a small directory of its own, so each rescan is quick and the delay is the
        // notification path's.
        let small = root + "/small"
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let smallHost = AppExtensionHost(identifier: "org.bench.host", locations: ExtensionLocations(
            hostBundle: root + "/host", external: [small], pointDirectories: [], stateFile: root + "/small-approvals"))
        let monitor = try await AppExtensionPoint.Monitor(points: [point], host: smallHost)
        var updates = monitor.updates.makeAsyncIterator()
        _ = await updates.next()
        var delays: [Double] = []
        for index in 0..<20 {
            let start = Self.now()
            try install(index, in: small, tag: "u")
            while let state = await updates.next() {
                if state.unapprovedCount == index + 1 { break }
            }
            delays.append(Self.now() - start)
            try await Task.sleep(for: .milliseconds(20))
        }
        monitor.cancel()
        return Results(snapshotCold: starts[0], snapshot: XsbBench.median(Array(starts.dropFirst())),
                       update: XsbBench.median(delays), updates: delays.count)
    }
}
