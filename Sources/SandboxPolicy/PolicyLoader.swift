import Glibc
import SandboxSystem

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
    package static func isPath(_ value: String) -> Bool { FilePaths.containsSlash(value) || FilePaths.hasSuffix(value, ".yaml") }

    static func policyName(forFile file: String) -> String {
        FilePaths.droppingSuffix(FilePaths.lastComponent(file), ".yaml")
    }

    /// Policy files are small; a larger "policy" is a mistake (or /dev/zero), not something to parse.
    static let maximumFileSize = 4 << 20

    static func read(file: String) throws(PolicyError) -> String {
        try readFile(file).text
    }

    /// The file's text, and its bytes as read (for ``PolicyResolution``). The file, its directory
    /// and every directory above it must pass ``TrustedPath``'s checks (owned by root or the
    /// caller, not writable by group or others); the bytes are read through the fd that was checked.
    static func readFile(_ file: String) throws(PolicyError) -> (text: String, bytes: [UInt8]) {
        let result: Result<[UInt8], TrustedPath.FileProblem>
        do {
            result = try TrustedPath.readFile(file, limit: maximumFileSize)
        } catch .missing {
            throw PolicyError(file: file, message: "no such policy file")
        } catch {
            throw PolicyError(file: file, message: error.description)
        }
        let bytes: [UInt8]
        switch result {
        case .success(let read): bytes = read
        case .failure(.notRegular(.directory)):
            throw PolicyError(file: file, message: "is a directory, not a policy file")
        case .failure(.notRegular):
            // A FIFO or a device would block the read, or never end (it is not opened for reading).
            throw PolicyError(file: file, message: "is not a regular file, not a policy file")
        case .failure(.tooLarge):
            throw PolicyError(file: file, message: "the policy file is larger than \(maximumFileSize >> 20) MiB")
        case .failure(.read(let error)):
            throw PolicyError(file: file, message: "cannot read the policy file: \(error)")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw PolicyError(file: file, message: "the policy file is not UTF-8 text")
        }
        return (text, bytes)
    }
}
