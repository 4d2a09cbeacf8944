import Glibc
import SandboxSystem

/// What a bundle holds, as its signature lists it: every file, directory and symbolic link below
/// the bundle directory (links not followed), with modes and SHA-256 digests, except the
/// signature file itself.
enum BundleContents {
    /// Directories deeper than this are not listed (nor signed).
    static let maximumDepth = 32

    /// The bundle's entries, sorted by path. A name that cannot be listed (not UTF-8, a control
    /// character), a FIFO, socket or device, or more than ``BundleSignature/maximumEntries``
    /// entries is an error naming the path.
    static func list(_ bundle: String, hasher: ContentHasher = .shared) throws(CatalogProblem) -> [BundleSignature.Entry] {
        var entries: [BundleSignature.Entry] = []
        try list(directory: bundle, relative: "", depth: 0, into: &entries, hasher: hasher)
        return BundleSignature.sortedByPath(entries)
    }

    private static func list(directory: String, relative: String, depth: Int, into entries: inout [BundleSignature.Entry],
                             hasher: ContentHasher) throws(CatalogProblem) {
        guard depth < maximumDepth else { throw CatalogProblem(.broken, file: directory, "directories nested deeper than \(maximumDepth) levels") }
        guard let names = SystemFiles.entryBytes(directory) else {
            throw CatalogProblem(.broken, file: directory, "cannot list the directory: \(errnoText())")
        }
        for bytes in names {
            let shown = FilePaths.join(directory, ExtensionCatalog.showingInvalidBytes(bytes))
            guard let name = String(validating: bytes, as: UTF8.self) else {
                throw CatalogProblem(.broken, file: shown, "the name is not UTF-8: a signed bundle's names must be")
            }
            let path = relative.isEmpty ? name : relative + "/" + name
            if FilePaths.isSame(path, BundleSignature.fileName) { continue }
            if let problem = BundleSignature.problem(withPath: path) {
                throw CatalogProblem(.broken, file: shown, "this name cannot be signed: it \(problem)")
            }
            guard entries.count < BundleSignature.maximumEntries else {
                throw CatalogProblem(.broken, file: directory, "the bundle has more than \(BundleSignature.maximumEntries) entries")
            }
            let full = FilePaths.join(directory, name)
            var info = stat()
            guard lstat(full, &info) == 0 else {
                throw CatalogProblem(.broken, file: full, "cannot stat: \(errnoText())")
            }
            let mode = UInt32(info.st_mode & 0o7777)
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                entries.append(.init(path: path, kind: .directory(mode: mode)))
                try list(directory: full, relative: path, depth: depth + 1, into: &entries, hasher: hasher)
            case S_IFREG:
                let fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
                guard fd >= 0 else { throw CatalogProblem(.broken, file: full, "cannot open: \(errnoText())") }
                defer { close(fd) }
                let (digest, fingerprint) = try hasher.digest(ofDescriptor: fd, named: full)
                guard fingerprint.inode == UInt64(info.st_ino), fingerprint.device == UInt64(info.st_dev) else {
                    throw CatalogProblem(.broken, file: full, "replaced while it was being read")
                }
                entries.append(.init(path: path, kind: .file(mode: mode, digest: digest)))
            case S_IFLNK:
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let count = readlink(full, &buffer, buffer.count - 1)
                guard count >= 0 else { throw CatalogProblem(.broken, file: full, "cannot read the symbolic link: \(errnoText())") }
                entries.append(.init(path: path, kind: .link(target: ContentHasher.digest(of: buffer[..<count].map { UInt8(bitPattern: $0) }))))
            default:
                throw CatalogProblem(.broken, file: full, "neither a file, a directory nor a symbolic link: a bundle cannot hold it")
            }
        }
    }
}
