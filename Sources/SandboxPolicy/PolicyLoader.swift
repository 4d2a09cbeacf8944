import Glibc

/// Reads policy files into ``Policy`` values.
///
/// A policy file is YAML (format described in `docs/policy-format.md`). Every problem is reported
/// with `FILE:LINE:COL`; a broken file is an error, never a silent fallback to something weaker.
public enum PolicyLoader {
    /// Loads and validates one policy file, following its `extends:` and `include:` (names are
    /// looked up along `searchPath`, by default ``PolicySearchPath/default(executablePath:environment:)``
    /// for the running executable). Throws a ``PolicyError`` (the first problem, with the others in
    /// ``PolicyError/additional``); a problem inside an included file names that file.
    public static func load(file: String, searchPath: PolicySearchPath? = nil) throws(PolicyError) -> Policy {
        try loadRecordingResolution(file: file, searchPath: searchPath).policy
    }

    /// ``load(file:searchPath:)``, and what outside the file's text decided the result: the files
    /// read with their bytes, how names resolved, canonical paths (see ``PolicyResolution``).
    public static func loadRecordingResolution(
        file: String, searchPath: PolicySearchPath? = nil
    ) throws(PolicyError) -> (policy: Policy, resolution: PolicyResolution) {
        let (text, bytes) = try readFile(file)
        let resolver = PolicyResolver(searchPath: searchPath)
        resolver.resolution.recordFile(file, bytes)
        let policy = try resolve(resolver, yaml: text, name: policyName(forFile: file), sourcePath: file)
        return (policy, resolver.resolution)
    }

    /// Every problem of a policy file and of the files it extends or includes, sorted by file
    /// (this one first) and position; empty when the file is a valid policy.
    public static func check(file: String, searchPath: PolicySearchPath? = nil) -> [PolicyError] {
        do {
            let text = try read(file: file)
            return check(yaml: text, name: policyName(forFile: file), sourcePath: file, searchPath: searchPath)
        } catch {
            return [error]
        }
    }

    /// Loads a policy given as a name (`standard`, looked up as `standard.yaml` along the search
    /// path, the last directory that has it winning) or as a path (a value containing `/` or ending
    /// in `.yaml`). `extends:` and `include:` names are looked up along the same path.
    public static func load(nameOrPath: String, searchPath: PolicySearchPath) throws(PolicyError) -> Policy {
        if isPath(nameOrPath) { return try load(file: nameOrPath, searchPath: searchPath) }
        return try load(file: searchPath.locate(name: nameOrPath), searchPath: searchPath)
    }

    /// Parses policy text. `name` becomes ``Policy/name``; errors name `sourcePath ?? name`.
    /// Relative `extends:`/`include:` paths are relative to `sourcePath`'s directory (or the
    /// current directory without one).
    public static func load(
        yaml: String, name: String, sourcePath: String? = nil, searchPath: PolicySearchPath? = nil
    ) throws(PolicyError) -> Policy {
        try resolve(PolicyResolver(searchPath: searchPath), yaml: yaml, name: name, sourcePath: sourcePath)
    }

    private static func resolve(
        _ resolver: PolicyResolver, yaml: String, name: String, sourcePath: String?
    ) throws(PolicyError) -> Policy {
        let policy = resolver.resolve(text: yaml, name: name, sourcePath: sourcePath)
        let errors = resolver.sink.sorted
        if var first = errors.first {
            first.additional = Array(errors.dropFirst())
            throw first
        }
        guard let policy else {
            throw PolicyError(file: sourcePath ?? name, message: "the policy could not be read")
        }
        return policy
    }

    /// Every problem of policy text (and of the files it extends or includes), sorted.
    public static func check(
        yaml: String, name: String, sourcePath: String? = nil, searchPath: PolicySearchPath? = nil
    ) -> [PolicyError] {
        let resolver = PolicyResolver(searchPath: searchPath)
        _ = resolver.resolve(text: yaml, name: name, sourcePath: sourcePath)
        return resolver.sink.sorted
    }

    /// Whether a `--policy` value or an `extends:`/`include:` target is a path (else a name).
    package static func isPath(_ value: String) -> Bool { value.contains("/") || value.hasSuffix(".yaml") }

    static func policyName(forFile file: String) -> String {
        var base = FilePaths.lastComponent(file)
        if base.hasSuffix(".yaml") { base.removeLast(5) }
        return base
    }

    /// Policy files are small; a larger "policy" is a mistake (or /dev/zero), not something to parse.
    static let maximumFileSize = 4 << 20

    static func read(file: String) throws(PolicyError) -> String {
        try readFile(file).text
    }

    /// The file's text, and its bytes as read (for ``PolicyResolution``).
    static func readFile(_ file: String) throws(PolicyError) -> (text: String, bytes: [UInt8]) {
        guard let kind = SystemFiles.kind(of: file) else {
            throw PolicyError(file: file, message: "no such policy file")
        }
        guard kind != S_IFDIR else { throw PolicyError(file: file, message: "is a directory, not a policy file") }
        // A FIFO or a device would block the read, or never end.
        guard kind == S_IFREG else { throw PolicyError(file: file, message: "is not a regular file, not a policy file") }
        let bytes: [UInt8]
        switch SystemFiles.bytes(file, limit: maximumFileSize) {
        case .success(let read): bytes = read
        case .failure(let error) where error.code == EFBIG:
            throw PolicyError(file: file, message: "the policy file is larger than \(maximumFileSize >> 20) MiB")
        case .failure(let error):
            throw PolicyError(file: file, message: "cannot read the policy file: \(error)")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw PolicyError(file: file, message: "the policy file is not UTF-8 text")
        }
        return (text, bytes)
    }
}

/// Where policies are looked up by name: directories in increasing precedence (the last
/// directory that has `NAME.yaml` wins, so an admin's copy in `/etc` overrides the shipped one).
public struct PolicySearchPath: Sendable, Equatable {
    public var directories: [String]

    public init(directories: [String]) {
        self.directories = directories
    }

    /// The system-wide directory for admins' policies.
    public static let systemDirectory = "/etc/extsandbox/policies"

    /// The install's policies directory, then `/etc/extsandbox/policies`.
    ///
    /// The install's directory is the first of: `$EXTSANDBOX_POLICIES_DIR`; `<exe dir>/Policies`;
    /// `<exe dir>/../share/extsandbox/policies`; the `Policies` directory of the first ancestor of
    /// the executable's directory that has `Policies/standard.yaml` (a checkout, when running from
    /// `.build/debug`). Symbolic links in `executablePath` are resolved first.
    public static func `default`(
        executablePath: String, environment: [String: String]? = nil
    ) -> PolicySearchPath {
        let environment = environment ?? SystemFiles.environment()
        var dirs: [String] = []
        if let install = installDirectory(executablePath: executablePath, environment: environment) {
            dirs.append(install)
        }
        dirs.append(systemDirectory)
        return PolicySearchPath(directories: dirs)
    }

    static func installDirectory(executablePath: String, environment: [String: String]) -> String? {
        if let env = environment["EXTSANDBOX_POLICIES_DIR"], !env.isEmpty { return env }
        // Plain realpath/stat: Foundation's URL path APIs cost a one-shot `extsandbox exec`
        // a noticeable share of its start-up.
        let exe = SystemFiles.realPath(executablePath) ?? executablePath
        let exeDir = FilePaths.directory(of: exe)
        let candidates = [FilePaths.join(exeDir, "Policies"), FilePaths.join(FilePaths.directory(of: exeDir), "share/extsandbox/policies")]
        if let found = candidates.first(where: { SystemFiles.kind(of: $0) == S_IFDIR }) { return found }
        var dir = exeDir
        while true {
            let policies = FilePaths.join(dir, "Policies")
            if SystemFiles.kind(of: FilePaths.join(policies, "standard.yaml")) != nil { return policies }
            if dir == "/" { return nil }
            dir = FilePaths.directory(of: dir)
        }
    }

    /// Every policy along the path: name → file (later directories override earlier ones).
    public func availablePolicies() -> [String: String] {
        Dictionary(entries().filter(\.isEffective).map { ($0.name, $0.file) }, uniquingKeysWith: { _, last in last })
    }

    /// The path of the running executable (`/proc/self/exe`), for ``default(executablePath:environment:)``.
    public static func currentExecutable() -> String {
        SystemFiles.linkTarget("/proc/self/exe") ?? CommandLine.arguments[0]
    }

    /// One policy file found along the path.
    public struct Entry: Sendable, Equatable {
        /// The policy's name (its file name without `.yaml`).
        public var name: String
        public var file: String
        /// The search-path directory it is in.
        public var directory: String
        /// Whether this is the file the name resolves to; `false` when a later directory has a
        /// file of the same name (this one is shadowed).
        public var isEffective: Bool
    }

    /// Every policy file in every directory of the path, in path order (then by name), each
    /// marked as effective or shadowed by a later directory's file of the same name.
    public func entries() -> [Entry] {
        var out: [Entry] = []
        for dir in directories {
            let files = SystemFiles.entries(dir) ?? []
            for file in files.sorted() where file.hasSuffix(".yaml") && !file.hasPrefix(".") {
                let path = FilePaths.join(dir, file)
                guard let kind = SystemFiles.kind(of: path), kind != S_IFDIR else { continue }
                out.append(Entry(name: String(file.dropLast(5)), file: path, directory: dir, isEffective: true))
            }
        }
        var winner: [String: Int] = [:]
        for (i, e) in out.enumerated() { winner[e.name] = i }
        for i in out.indices { out[i].isEffective = winner[out[i].name] == i }
        return out
    }

    /// The file of policy `name`: the last directory that has `name.yaml`.
    public func locate(name: String) throws(PolicyError) -> String {
        try locate(name: name, excluding: nil)
    }

    /// The file of policy `name`, skipping the file whose canonical path is `excluded` (so a
    /// policy can extend the one it overrides: `/etc/…/standard.yaml` saying `extends: standard`
    /// gets the shipped `standard.yaml`).
    func locate(name: String, excluding excluded: String?) throws(PolicyError) -> String {
        guard !name.isEmpty, !name.contains("/"), !name.hasPrefix(".") else {
            throw PolicyError(file: name, message: "not a policy name (names are file names without .yaml)")
        }
        var found: String?
        for dir in directories {
            let candidate = FilePaths.join(dir, name + ".yaml")
            if let kind = SystemFiles.kind(of: candidate), kind != S_IFDIR,
                excluded == nil || PolicyResolver.canonical(candidate) != excluded
            {
                found = candidate
            }
        }
        if let found { return found }
        let hint = Suggest.hint(for: name, in: availablePolicies().keys)
        let places = directories.isEmpty ? "(no directories)" : directories.joined(separator: ", ")
        let other = excluded == nil ? "" : " other than the file itself"
        throw PolicyError(file: name, message: "no policy named \"\(name)\"\(other)\(hint) (looked for \(name).yaml in: \(places))")
    }
}
