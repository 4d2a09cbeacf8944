import Glibc
import SandboxSystem

/// Where a bundle stands with its signature.
public enum SignatureCheck: Sendable, Hashable {
    /// No signature file: the bundle is approved (if at all) by its hashes.
    case unsigned
    /// The signature file verifies and lists exactly what the bundle holds.
    case valid(BundleSignature)
    /// A signature file that cannot be read, does not verify, or does not match the bundle
    /// (`reason` says which: "bin/run changed since it was signed").
    case broken(reason: String)

    /// The signer of a valid signature.
    public var signer: SignerKey? {
        if case .valid(let signature) = self { return signature.signer }
        return nil
    }
}

/// Signs bundles and checks their signatures (docs/signatures.md).
public enum BundleSigning {
    /// Signs the bundle at `path` (its manifest must parse) with `key`: lists every file,
    /// directory and link, and writes `extension.signature` atomically (a temporary file, then
    /// `rename`). Returns the signature written.
    @discardableResult
    public static func sign(bundleAt path: String, with key: SigningKey) throws(CatalogProblem) -> BundleSignature {
        let manifestPath = FilePaths.join(path, ExtensionManifest.fileName)
        let manifest: ExtensionManifest
        switch SystemFiles.bytes(manifestPath, limit: 64 << 10) {
        case .failure(let error): throw CatalogProblem(.broken, file: manifestPath, "cannot read: \(error)")
        case .success(let bytes): manifest = try ExtensionManifest.parse(bytes, path: manifestPath)
        }
        guard ExtensionVersion.isSignable(manifest.version) else {
            throw CatalogProblem(.broken, file: manifestPath, line: manifest.lines["version"] ?? 0,
                                 "version \(manifest.version) cannot be signed: use 1 to 64 letters, digits and . + - _ ~ (e.g. 1.2.0)")
        }
        var signature = BundleSignature(identifier: manifest.identifier, version: manifest.version, signer: key.publicKey,
                                        entries: try BundleContents.list(path))
        signature.signature = try key.sign(Array(signature.signedText.utf8))
        try write(signature.rendered(), to: FilePaths.join(path, BundleSignature.fileName))
        return signature
    }

    /// Checks the signature of a bundle that passed validation: the file parses, the signature is
    /// its signer's, the identifier and version are the manifest's, and the listing is exactly
    /// the bundle's contents now.
    public static func check(_ bundle: ValidatedBundle, hasher: ContentHasher = .shared) -> SignatureCheck {
        let file = FilePaths.join(bundle.path, BundleSignature.fileName)
        var info = stat()
        guard lstat(file, &info) == 0 else {
            return errno == ENOENT ? .unsigned : .broken(reason: "cannot read \(file): \(errnoText())")
        }
        guard info.st_mode & S_IFMT == S_IFREG else { return .broken(reason: "\(file) is not a regular file") }
        let signature: BundleSignature
        do throws(CatalogProblem) {
            switch SystemFiles.bytes(file, limit: BundleSignature.maximumSize) {
            case .failure(let error): return .broken(reason: "cannot read \(file): \(error)")
            case .success(let bytes): signature = try BundleSignature.parse(bytes, path: file)
            }
        } catch {
            return .broken(reason: error.description)
        }
        guard signature.isValid else { return .broken(reason: "the signature does not verify: \(file) was altered or not made by \(signature.signer)") }
        guard signature.identifier == bundle.manifest.identifier else {
            return .broken(reason: "signed for \(signature.identifier), but the manifest says \(bundle.manifest.identifier)")
        }
        guard signature.version == bundle.manifest.version else {
            return .broken(reason: "signed for version \(signature.version), but the manifest says \(bundle.manifest.version)")
        }
        let current: [BundleSignature.Entry]
        do throws(CatalogProblem) {
            current = try BundleContents.list(bundle.path, hasher: hasher)
        } catch {
            return .broken(reason: error.description)
        }
        if let difference = difference(signed: signature.entries, current: current) { return .broken(reason: difference) }
        return .valid(signature)
    }

    /// The first difference between what was signed and what is there, or `nil`.
    static func difference(signed: [BundleSignature.Entry], current: [BundleSignature.Entry]) -> String? {
        var i = 0, j = 0
        while i < signed.count || j < current.count {
            if j == current.count || (i < signed.count && signed[i].path.utf8.lexicographicallyPrecedes(current[j].path.utf8)) {
                return "\(signed[i].path) was removed since the bundle was signed"
            }
            if i == signed.count || current[j].path.utf8.lexicographicallyPrecedes(signed[i].path.utf8) {
                return "\(current[j].path) was added after the bundle was signed"
            }
            let (was, now) = (signed[i], current[j])
            switch (was.kind, now.kind) {
            case (.file(let m1, let d1), .file(let m2, let d2)):
                if d1 != d2 { return "\(now.path) changed since the bundle was signed" }
                if m1 != m2 { return "the mode of \(now.path) changed since the bundle was signed (\(BundleSignature.Entry.octal(m1)) → \(BundleSignature.Entry.octal(m2)))" }
            case (.directory(let m1), .directory(let m2)):
                if m1 != m2 { return "the mode of \(now.path) changed since the bundle was signed (\(BundleSignature.Entry.octal(m1)) → \(BundleSignature.Entry.octal(m2)))" }
            case (.link(let t1), .link(let t2)):
                if t1 != t2 { return "the symbolic link \(now.path) points elsewhere since the bundle was signed" }
            default:
                return "\(now.path) is \(now.kindName) now; it was \(was.kindName) when the bundle was signed"
            }
            i += 1
            j += 1
        }
        return nil
    }

    /// Writes `text` to `path` through a temporary file in the same directory and `rename`.
    static func write(_ text: String, to path: String, mode: mode_t = 0o644) throws(CatalogProblem) {
        let temporary = FilePaths.join(FilePaths.directory(of: path), ".\(FilePaths.lastComponent(path)).\(getpid()).\(UInt32.random(in: 0 ... .max))")
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { throw CatalogProblem(.broken, file: temporary, "cannot create: \(errnoText())") }
        var done = false
        defer {
            close(fd)
            if !done { unlink(temporary) }
        }
        guard writeAll(fd, Array(text.utf8)) else { throw CatalogProblem(.broken, file: temporary, "write: \(errnoText())") }
        guard fchmod(fd, mode) == 0, fsync(fd) == 0 else { throw CatalogProblem(.broken, file: temporary, "fsync: \(errnoText())") }
        guard rename(temporary, path) == 0 else { throw CatalogProblem(.broken, file: path, "rename: \(errnoText())") }
        done = true
    }
}
