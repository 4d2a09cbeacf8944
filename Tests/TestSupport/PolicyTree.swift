import Foundation
import SandboxPolicy

/// Policy files for one test, in a fresh directory under the checkout's .build (trusted, unlike
/// /tmp's): `PolicyTree(["a.yaml": text, "dir/b.yaml": text])`.
public struct PolicyTree {
    /// The directory that holds the files.
    public let dir: URL

    /// Writes `files` (relative path: text), creating the directories they need.
    public init(_ files: [String: String]) throws {
        dir = try TestPaths.makePolicyDirectory("policy-tree")
        for (name, text) in files {
            let url = dir.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: url, atomically: true, encoding: .utf8)
        }
    }

    /// The path of the file `name` of the tree.
    public func path(_ name: String) -> String { dir.appendingPathComponent(name).path }

    /// A search path of this directory alone.
    public var searchPath: PolicySearchPath { PolicySearchPath(directories: [dir.path]) }

    /// Loads the file `name`, looking up names along ``searchPath``.
    public func load(_ name: String) throws -> Policy { try PolicyLoader.load(file: path(name), searchPath: searchPath) }

    /// Every problem of the file `name`, looking up names along ``searchPath``.
    public func check(_ name: String) -> [PolicyError] { PolicyLoader.check(file: path(name), searchPath: searchPath) }
}
