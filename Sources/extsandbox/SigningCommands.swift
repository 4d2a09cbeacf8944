import SandboxExec
import ArgumentParser
import ExtensionCatalog
import Glibc

/// `extsandbox key generate FILE`
struct KeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key", abstract: "Make a developer's Ed25519 signing key.",
        subcommands: [KeyGenerateCommand.self])
}

struct KeyGenerateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Generate an Ed25519 signing key into a new file (mode 0600).",
        discussion: """
            Prints the public key (ed25519:<64 hex>), which names you as a signer: owners approve \
            your extensions for it, and every update you sign with the same key keeps their \
            approval. Keep the file secret; a lost key cannot sign updates that keep approvals. \
            Format: docs/signatures.md.

            Example:
              extsandbox key generate ~/.config/extsandbox/signing.key
            """)

    @Argument(help: "The key file to create (it must not exist).", completion: .file())
    var file: String

    func run() throws {
        let key = SigningKey.generate()
        let fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            printError("cannot create \(file): \(String(cString: strerror(errno)))", hint: errno == EEXIST ? "the key file exists already: choose another name" : nil)
            throw ExitCode.failure
        }
        let bytes = Array(key.rendered().utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0 else {
            close(fd)
            unlink(file)
            printError("cannot write \(file): \(String(cString: strerror(errno)))")
            throw ExitCode.failure
        }
        close(fd)
        print("wrote \(file)")
        print("public key: \(key.publicKey)")
    }
}

/// `extsandbox sign BUNDLE --key KEY`
struct SignCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Sign a bundle: every file, directory and link it holds.",
        discussion: """
            Writes BUNDLE/extension.signature: the identifier and version of the manifest, your \
            public key, every file (path, mode, SHA-256), directory and symbolic link of the \
            bundle, and an Ed25519 signature over them. Any file added, removed, renamed or \
            changed afterwards breaks it; sign as the last step of building the bundle. \
            Format: docs/signatures.md.

            Example:
              extsandbox sign build/upcase.appex --key ~/.config/extsandbox/signing.key
            """)

    @Argument(help: "The bundle directory.", completion: .directory)
    var bundle: String

    @Option(name: .long, help: "The signing key file (from `extsandbox key generate`).", completion: .file())
    var key: String

    func run() throws {
        do throws(CatalogProblem) {
            let signingKey = try SigningKey.load(key)
            let signature = try BundleSigning.sign(bundleAt: bundle, with: signingKey)
            print("signed \(signature.identifier) \(signature.version) (\(signature.entries.count) entries) as \(signature.signer)")
        } catch {
            printError("\(error)")
            throw ExitCode.failure
        }
    }
}

/// `extsandbox verify BUNDLE`
struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check a bundle's signature against what the bundle holds.",
        discussion: "Exits 0 and names the signer when the signature verifies and lists exactly the bundle's contents; exits 1 with the first difference otherwise, or when the bundle is unsigned.")

    @Argument(help: "The bundle directory.", completion: .directory)
    var bundle: String

    func run() throws {
        let validated: ValidatedBundle
        switch BundleValidator.validate(bundleAt: bundle) {
        case .failure(let problem):
            printError("\(problem)", hint: ErrorAdvice.catalog(problem))
            throw ExitCode.failure
        case .success(let valid): validated = valid
        }
        switch BundleSigning.check(validated) {
        case .valid(let signature):
            print("\(bundle): signed by \(signature.signer) for \(signature.identifier) \(signature.version); all \(signature.entries.count) entries match")
        case .unsigned:
            printError("\(bundle) is not signed (no \(BundleSignature.fileName))")
            throw ExitCode.failure
        case .broken(let reason):
            printError("\(bundle): the signature does not hold: \(reason)")
            throw ExitCode.failure
        }
    }
}
