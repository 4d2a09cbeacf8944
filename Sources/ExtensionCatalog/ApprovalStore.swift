import Glibc
import SandboxPolicy
import SandboxSystem

/// The owner's choices: which external extensions are approved (pinned to the SHA-256 of their
/// executable and manifest) and which extensions are disabled.
public struct ApprovalState: Sendable, Equatable {
    /// An approval holds for exactly these contents.
    public struct Approval: Sendable, Hashable {
        public var executable: ContentDigest
        public var manifest: ContentDigest

        public init(executable: ContentDigest, manifest: ContentDigest) {
            self.executable = executable
            self.manifest = manifest
        }
    }

    public var approvals: [String: Approval] = [:]
    public var disabled: Set<String> = []

    public init() {}

    static let header = "extsandbox-approvals 1"

    /// The file's text: sorted, so that unchanged choices give the same bytes.
    public func rendered() -> String {
        var lines = [
            "# The owner's extension choices: written by `extsandbox approve|revoke|enable|disable`.",
            "# Format: docs/extensions.md. An approval holds only for these SHA-256 digests.",
            Self.header,
        ]
        for (identifier, approval) in approvals.sorted(by: { $0.key < $1.key }) {
            lines.append("approved \(identifier) executable=\(approval.executable) manifest=\(approval.manifest)")
        }
        for identifier in disabled.sorted() { lines.append("disabled \(identifier)") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Parses the file's text; any line it does not understand is an error naming the line.
    public static func parse(_ text: String, path: String) throws(CatalogProblem) -> ApprovalState {
        var state = ApprovalState()
        var sawHeader = false
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = index + 1
            let trimmed = raw.trimmingSpaces
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            guard sawHeader else {
                guard trimmed == header else {
                    throw CatalogProblem(.broken, file: path, line: line, "expected '\(header)' as the first line, found '\(trimmed)'")
                }
                sawHeader = true
                continue
            }
            let words = trimmed.split(separator: " ", omittingEmptySubsequences: true)
            switch (words.first, words.count) {
            case ("approved", 4):
                let identifier = String(words[1])
                guard words[2].hasPrefix("executable="), let executable = ContentDigest(words[2].dropFirst(11)),
                      words[3].hasPrefix("manifest="), let manifest = ContentDigest(words[3].dropFirst(9)) else {
                    throw CatalogProblem(.broken, file: path, line: line, "expected 'approved ID executable=sha256:HEX manifest=sha256:HEX'")
                }
                state.approvals[identifier] = Approval(executable: executable, manifest: manifest)
            case ("disabled", 2):
                state.disabled.insert(String(words[1]))
            default:
                throw CatalogProblem(.broken, file: path, line: line, "cannot read '\(trimmed)' (expected 'approved …' or 'disabled ID')")
            }
        }
        guard sawHeader else { throw CatalogProblem(.broken, file: path, line: 1, "empty: expected '\(header)'") }
        return state
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while let c = s.first, c == " " || c == "\t" || c == "\r" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" || c == "\r" { s = s.dropLast() }
        return s
    }
}

/// The approvals file: read without a lock (it is only ever replaced whole, by `rename`),
/// changed under an exclusive `flock` of `<file>.lock` (read, modify, write a temporary file in
/// the same directory, `fsync`, `rename` over, `fsync` the directory), so that two writers never
/// lose each other's change. A file that cannot be read or parsed is an error naming it: never
/// read as "nothing approved" or "everything approved", never replaced.
public struct ApprovalStore: Sendable {
    public let path: String

    public init(path: String) { self.path = path }

    /// The current state: empty when no file exists yet.
    public func load() throws(CatalogProblem) -> ApprovalState {
        switch SystemFiles.bytes(path, limit: 16 << 20) {
        case .success(let bytes):
            return try ApprovalState.parse(String(decoding: bytes, as: UTF8.self), path: path)
        case .failure(let error) where error.code == ENOENT:
            return ApprovalState()
        case .failure(let error):
            throw CatalogProblem(.broken, file: path, "cannot read the approvals file: \(error)")
        }
    }

    /// Reads, changes and writes the state atomically under the lock; returns the new state.
    @discardableResult
    public func update(_ change: (inout ApprovalState) throws(CatalogProblem) -> Void) throws(CatalogProblem) -> ApprovalState {
        let directory = FilePaths.directory(of: path)
        try Self.makeDirectories(directory)
        let lockPath = path + ".lock"
        let lock = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard lock >= 0 else { throw CatalogProblem(.broken, file: lockPath, "cannot open the lock file: \(errnoText())") }
        defer { close(lock) }
        while flock(lock, LOCK_EX) != 0 {
            guard errno == EINTR else { throw CatalogProblem(.broken, file: lockPath, "flock: \(errnoText())") }
        }
        var state = try load()
        try change(&state)
        try write(state.rendered(), directory: directory)
        return state
    }

    private func write(_ text: String, directory: String) throws(CatalogProblem) {
        var template = Array((FilePaths.join(directory, ".approvals.XXXXXX")).utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw CatalogProblem(.broken, file: directory, "cannot create a temporary file: \(errnoText())") }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let temporary = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var done = false
        defer {
            close(fd)
            if !done { unlink(temporary) }
        }
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw CatalogProblem(.broken, file: temporary, "write: \(errnoText())") }
            offset += n
        }
        guard fchmod(fd, 0o644) == 0, fsync(fd) == 0 else { throw CatalogProblem(.broken, file: temporary, "fsync: \(errnoText())") }
        guard rename(temporary, path) == 0 else { throw CatalogProblem(.broken, file: path, "rename: \(errnoText())") }
        done = true
        let dir = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dir >= 0 {
            defer { close(dir) }
            guard fsync(dir) == 0 else { throw CatalogProblem(.broken, file: directory, "fsync: \(errnoText())") }
        }
    }

    /// `mkdir -p` with mode 0700 for what it creates (the owner's private state).
    static func makeDirectories(_ directory: String) throws(CatalogProblem) {
        guard !directory.isEmpty, SystemFiles.kind(of: directory) == nil else { return }
        try makeDirectories(FilePaths.directory(of: directory))
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw CatalogProblem(.broken, file: directory, "cannot create the directory: \(errnoText())")
        }
    }
}
