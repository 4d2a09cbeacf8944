import Glibc
import CSeccomp
import SandboxSystem

/// Everything outside a policy's text that decided what ``PolicyLoader`` made of it: which files
/// it read (with their exact bytes), how each `extends:`/`include:` *name* resolved along the
/// search path, and which canonical path each file had (the resolver merges a file once per
/// canonical path and detects cycles with them).
///
/// With the same build of extsandbox (and of libseccomp, whose syscall table validation uses),
/// loading the same top-level file again gives the same ``Policy`` exactly when
/// ``isCurrent(searchPath:)`` holds: every file still has the recorded bytes, every recorded path
/// still has the recorded canonical path, and every name still resolves to the recorded file.
/// That is what lets the CLI cache a resolved policy (`PolicyCacheEntry`) and skip parsing.
///
/// It is kept out of ``Policy`` on purpose: `Policy`'s equality is about what the sandbox may do
/// and where it came from (``Policy/composedFrom``), not about the state of the file system.
public struct PolicyResolution: Sendable, Equatable {
    /// A file the loader read, and the bytes it parsed.
    public struct File: Sendable, Equatable {
        public var path: String
        public var bytes: [UInt8]

        package init(path: String, bytes: [UInt8]) {
            self.path = path
            self.bytes = bytes
        }
    }

    /// One `extends:`/`include:` given as a name: `PolicySearchPath.locate(name:excluding:)`
    /// returned `file`.
    public struct NameLookup: Sendable, Equatable {
        public var name: String
        /// The canonical path of the referring file, which the lookup skips.
        public var excluding: String?
        public var file: String

        package init(name: String, excluding: String?, file: String) {
            self.name = name
            self.excluding = excluding
            self.file = file
        }
    }

    /// A path the resolver identified a file by, and its canonical form then.
    public struct CanonicalPath: Sendable, Equatable {
        public var path: String
        public var canonical: String

        package init(path: String, canonical: String) {
            self.path = path
            self.canonical = canonical
        }
    }

    /// The search-path directories names were looked up in; empty when no name was looked up.
    public var searchDirectories: [String] = []
    /// Every file read, the top-level file first, then in the order they were read.
    public var files: [File] = []
    public var nameLookups: [NameLookup] = []
    public var canonicalPaths: [CanonicalPath] = []

    public init() {}

    mutating func recordFile(_ path: String, _ bytes: [UInt8]) {
        if !files.contains(where: { FilePaths.isSame($0.path, path) }) { files.append(File(path: path, bytes: bytes)) }
    }

    mutating func recordCanonical(_ path: String, _ canonical: String) {
        if !canonicalPaths.contains(where: { FilePaths.isSame($0.path, path) }) {
            canonicalPaths.append(CanonicalPath(path: path, canonical: canonical))
        }
    }

    mutating func recordLookup(name: String, excluding: String?, file: String, directories: [String]) {
        searchDirectories = directories
        if !nameLookups.contains(where: { $0.name == name && $0.excluding == excluding }) {
            nameLookups.append(NameLookup(name: name, excluding: excluding, file: file))
        }
    }

    /// Whether loading the same file along `searchPath` would read exactly these files and
    /// resolve every name and path the same way (so, with the same build, give the same policy).
    /// Costs a checked walk (TrustedPath) of each search directory per name, a `realpath` per
    /// path, and a checked read of each file.
    public func isCurrent(searchPath: PolicySearchPath) -> Bool {
        guard !files.isEmpty else { return false }
        if !nameLookups.isEmpty && !FilePaths.areSame(searchPath.directories, searchDirectories) { return false }
        for entry in canonicalPaths where !FilePaths.isSame(PolicyResolver.canonical(entry.path), entry.canonical) { return false }
        for lookup in nameLookups {
            guard let found = try? searchPath.locate(name: lookup.name, excluding: lookup.excluding),
                  FilePaths.isSame(found, lookup.file)
            else { return false }
        }
        for file in files where !Self.hasBytes(file.path, file.bytes) { return false }
        return true
    }

    /// Whether the file at `path` holds exactly `bytes`, read as the loader reads it (through
    /// ``TrustedPath``: a file that no longer passes its checks is not current).
    static func hasBytes(_ path: String, _ bytes: [UInt8]) -> Bool {
        guard case .success(let current)? = try? TrustedPath.readFile(path, limit: bytes.count) else { return false }
        return current == bytes
    }
}

/// The version of the libseccomp the process uses: validation asks it which syscalls exist and
/// compilation builds the BPF with it, and it is a shared library that can be upgraded without
/// extsandbox being rebuilt. (A distribution patch that keeps the version number is not seen.)
public enum SeccompLibrary {
    public static func identity() -> String {
        guard let version = seccomp_version() else { return "libseccomp ?" }
        return "libseccomp \(version.pointee.major).\(version.pointee.minor).\(version.pointee.micro)"
    }
}
