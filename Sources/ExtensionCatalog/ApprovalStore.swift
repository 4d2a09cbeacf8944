import Glibc
import SandboxSystem

/// The owner's (or, in the system file, the administrator's) choices: which external extensions
/// are approved (pinned to the SHA-256 of their executable and manifest, or, when signed, to their
/// signer and the lowest version still approved), which developer keys are trusted for every
/// extension they sign, which extensions are disabled, and which are forbidden.
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

    /// An approval of a signed extension: it holds for every bundle with this identifier that
    /// `signer` signed, of `version` or a later one (docs/signatures.md).
    public struct SignedApproval: Sendable, Hashable {
        public var signer: SignerKey
        public var version: String

        public init(signer: SignerKey, version: String) {
            self.signer = signer
            self.version = version
        }
    }

    /// Approvals pinned to contents (unsigned extensions).
    public var approvals: [String: Approval] = [:]
    /// Approvals pinned to a signer (signed extensions). An identifier is in at most one of
    /// ``approvals`` and ``signedApprovals``.
    public var signedApprovals: [String: SignedApproval] = [:]
    /// Keys whose every validly signed extension is approved (`approve --signer`).
    public var trustedSigners: Set<SignerKey> = []
    public var disabled: Set<String> = []
    /// Forbidden extensions: never approved, whatever else says so (the system file's bans).
    public var forbidden: Set<String> = []

    public init() {}

    static let header = "extsandbox-approvals 1"

    /// The file's text: sorted, so that unchanged choices give the same bytes.
    public func rendered(system: Bool = false) -> String {
        var lines = [
            system ? "# The administrator's extension decisions for every user: written by `extsandbox approve|revoke --system` and `extsandbox forbid`."
                : "# The owner's extension choices: written by `extsandbox approve|revoke|enable|disable`.",
            "# Format: docs/extensions.md. An approval holds only for these SHA-256 digests, or for this signer and version.",
            Self.header,
        ]
        for (identifier, approval) in approvals.sorted(by: { $0.key < $1.key }) {
            lines.append("approved \(identifier) executable=\(approval.executable) manifest=\(approval.manifest)")
        }
        for (identifier, approval) in signedApprovals.sorted(by: { $0.key < $1.key }) {
            lines.append("approved \(identifier) signer=\(approval.signer) version=\(approval.version)")
        }
        for signer in trustedSigners.sorted() { lines.append("trusted-signer \(signer)") }
        for identifier in disabled.sorted() { lines.append("disabled \(identifier)") }
        for identifier in forbidden.sorted() { lines.append("forbidden \(identifier)") }
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
            case ("approved", 4) where words[2].hasPrefix("signer="):
                let identifier = String(words[1])
                guard let signer = SignerKey(words[2].dropFirst(7)), words[3].hasPrefix("version="),
                      ExtensionVersion.isSignable(String(words[3].dropFirst(8))) else {
                    throw CatalogProblem(.broken, file: path, line: line, "expected 'approved ID signer=ed25519:HEX version=VERSION'")
                }
                guard state.approvals[identifier] == nil else { throw CatalogProblem(.broken, file: path, line: line, "\(identifier) is approved twice") }
                state.signedApprovals[identifier] = SignedApproval(signer: signer, version: String(words[3].dropFirst(8)))
            case ("approved", 4):
                let identifier = String(words[1])
                guard words[2].hasPrefix("executable="), let executable = ContentDigest(words[2].dropFirst(11)),
                      words[3].hasPrefix("manifest="), let manifest = ContentDigest(words[3].dropFirst(9)) else {
                    throw CatalogProblem(.broken, file: path, line: line, "expected 'approved ID executable=sha256:HEX manifest=sha256:HEX'")
                }
                guard state.signedApprovals[identifier] == nil else { throw CatalogProblem(.broken, file: path, line: line, "\(identifier) is approved twice") }
                state.approvals[identifier] = Approval(executable: executable, manifest: manifest)
            case ("trusted-signer", 2):
                guard let signer = SignerKey(words[1]) else {
                    throw CatalogProblem(.broken, file: path, line: line, "expected 'trusted-signer ed25519:HEX' (64 lowercase hex digits)")
                }
                state.trustedSigners.insert(signer)
            case ("disabled", 2):
                state.disabled.insert(String(words[1]))
            case ("forbidden", 2):
                state.forbidden.insert(String(words[1]))
            default:
                throw CatalogProblem(.broken, file: path, line: line, "cannot read '\(trimmed)' (expected 'approved …', 'trusted-signer KEY', 'disabled ID' or 'forbidden ID')")
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
///
/// The file decides what runs, so it is trusted as a policy is (``TrustedPath``): it, its
/// directory and every directory above it must be owned by root or the caller and not writable by
/// group or others, on every read and before every write. Otherwise a root caller whose
/// `XDG_STATE_HOME` points into another user's directory would launch what that user approved.
///
/// The system-wide file (``ExtensionLocations/systemStateFile``, `system: true`) holds the
/// administrator's decisions for every user: it must also be owned by root itself, and its
/// directories are created readable by everyone (0755).
public struct ApprovalStore: Sendable {
    public let path: String
    /// Whether this is the administrator's file, which only root may own.
    public let isSystem: Bool

    public init(path: String, system: Bool = false) {
        self.path = path
        self.isSystem = system
    }

    /// Files larger than this are not approvals files.
    static let maximumSize = 16 << 20

    /// The ownership rule, for errors.
    static let rule = "the approvals file, its directory and every directory above it must be owned by root or by you and not writable by group or others"

    /// The current state: empty when no file exists yet.
    public func load() throws(CatalogProblem) -> ApprovalState {
        let result: Result<[UInt8], TrustedPath.FileProblem>
        var owner: uid_t = 0
        do {
            if isSystem {
                // Checked before the read through the same walk: whoever could swap the file in
                // between owns its directory, and the walk allows only root or the caller there.
                let (fd, info, _) = try TrustedPath.openFile(path)
                fd.close()
                owner = info.st_uid
            }
            result = try TrustedPath.readFile(path, limit: Self.maximumSize)
        } catch .missing {
            // Every directory the walk reached passed its checks; what is missing holds nothing.
            return ApprovalState()
        } catch {
            throw problem(error, doing: "read the approvals file")
        }
        guard owner == 0 else {
            throw CatalogProblem(.unsafe, file: path, "refused: the system approvals file is owned by uid \(owner), not by root; it decides for every user, so only root may own it")
        }
        switch result {
        case .success(let bytes):
            return try ApprovalState.parse(String(decoding: bytes, as: UTF8.self), path: path)
        case .failure(.notRegular(let kind)):
            throw CatalogProblem(.broken, file: path, "cannot read the approvals file: it is \(kind == .directory ? "a directory" : "not a regular file")")
        case .failure(.tooLarge):
            throw CatalogProblem(.broken, file: path, "cannot read the approvals file: it is larger than \(Self.maximumSize >> 20) MiB")
        case .failure(.read(let error)):
            throw CatalogProblem(.broken, file: path, "cannot read the approvals file: \(error)")
        }
    }

    /// Reads, changes and writes the state atomically under the lock; returns the new state.
    /// The directory is opened (and created, mode 0700, where missing) through the same checks,
    /// and everything in it is reached through that open directory.
    @discardableResult
    public func update(_ change: (inout ApprovalState) throws(CatalogProblem) -> Void) throws(CatalogProblem) -> ApprovalState {
        let directory: TrustedPath.Directory
        do {
            directory = try Self.openCreatingDirectory(FilePaths.directory(of: TrustedPath.absolute(path)), mode: isSystem ? 0o755 : 0o700)
        } catch {
            throw problem(error, doing: "write the approvals file")
        }
        defer { directory.close() }
        let name = FilePaths.lastComponent(path)
        let lockPath = path + ".lock"
        let lock = openat(directory.fd.rawValue, name + ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard lock >= 0 else { throw CatalogProblem(.broken, file: lockPath, "cannot open the lock file: \(errnoText())") }
        defer { close(lock) }
        guard retryingInterrupts({ flock(lock, LOCK_EX) }) == 0 else {
            throw CatalogProblem(.broken, file: lockPath, "flock: \(errnoText())")
        }
        var state = try load()
        try change(&state)
        try write(state.rendered(system: isSystem), name: name, in: directory)
        return state
    }

    private func write(_ text: String, name: String, in directory: TrustedPath.Directory) throws(CatalogProblem) {
        let dir = directory.fd.rawValue
        var temporary = ""
        var fd: Int32 = -1
        for _ in 0..<100 {
            temporary = ".\(name).\(getpid()).\(UInt32.random(in: 0 ... .max))"
            fd = openat(dir, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if fd >= 0 || errno != EEXIST { break }
        }
        let temporaryPath = FilePaths.join(directory.path, temporary)
        guard fd >= 0 else { throw CatalogProblem(.broken, file: temporaryPath, "cannot create a temporary file: \(errnoText())") }
        var done = false
        defer {
            close(fd)
            if !done { unlinkat(dir, temporary, 0) }
        }
        guard writeAll(fd, Array(text.utf8)) else { throw CatalogProblem(.broken, file: temporaryPath, "write: \(errnoText())") }
        guard fchmod(fd, 0o644) == 0, fsync(fd) == 0 else { throw CatalogProblem(.broken, file: temporaryPath, "fsync: \(errnoText())") }
        guard renameat(dir, temporary, dir, name) == 0 else { throw CatalogProblem(.broken, file: path, "rename: \(errnoText())") }
        done = true
        guard fsync(dir) == 0 else { throw CatalogProblem(.broken, file: directory.path, "fsync: \(errnoText())") }
    }

    /// `mkdir -p` through ``TrustedPath``: each missing directory is made (mode 0700 for the
    /// owner's private state, 0755 for the system file) in a parent that passed the checks, and
    /// the result is checked too.
    static func openCreatingDirectory(_ directory: String, mode: mode_t = 0o700) throws(TrustedPath.Failure) -> TrustedPath.Directory {
        do {
            return try TrustedPath.openDirectory(directory, createMode: mode)
        } catch .missing {
            let parent = FilePaths.directory(of: directory)
            guard !parent.isEmpty, parent != directory else { throw .missing(path: directory) }
            try openCreatingDirectory(parent, mode: mode).close()
            return try TrustedPath.openDirectory(directory, createMode: mode)
        }
    }

    /// A failed walk as a problem of the approvals file, naming the part that failed.
    private func problem(_ failure: TrustedPath.Failure, doing what: String) -> CatalogProblem {
        switch failure {
        case .untrusted(let at, let reason):
            return CatalogProblem(.unsafe, file: path, "refused: \(at) \(reason); \(Self.rule)")
        case .missing(let at):
            return CatalogProblem(.broken, file: path, "cannot \(what): \(at) does not exist")
        case .failed(let at, let action, let error):
            return CatalogProblem(.broken, file: path, "cannot \(what): cannot \(action) \(at): \(error)")
        }
    }
}
