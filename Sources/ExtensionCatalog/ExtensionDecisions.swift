import SandboxSystem

/// Whose decision made an extension's status (`list` shows it).
public enum DecisionSource: String, Sendable, Hashable {
    /// Inside its host's bundle: approved implicitly.
    case bundled
    /// The user's approvals file.
    case user
    /// The administrator's file, for every user.
    case system
    /// A developer key the user trusts (`approve --signer`).
    case userSigner = "user-signer"
    /// A developer key the administrator trusts (`approve --system --signer`).
    case systemSigner = "system-signer"
}

/// The two files that decide what runs: the user's own choices and the administrator's for every
/// user (docs/extensions.md, "The admin's decisions"). A ban in either always wins; an approval
/// in either approves; `disable` in either turns the extension off.
public struct ExtensionDecisions: Sendable, Equatable {
    public var user: ApprovalState
    public var system: ApprovalState
    public var userFile: String
    public var systemFile: String

    public init(user: ApprovalState, system: ApprovalState = ApprovalState(), userFile: String = "", systemFile: String = "") {
        self.user = user
        self.system = system
        self.userFile = userFile
        self.systemFile = systemFile
    }

    /// Reads both files (the system one must be root's: ``ApprovalStore``). Either one broken is
    /// an error: never read as "nothing decided".
    public static func load(_ locations: ExtensionLocations) throws(CatalogProblem) -> ExtensionDecisions {
        ExtensionDecisions(
            user: try ApprovalStore(path: locations.stateFile).load(),
            system: try ApprovalStore(path: locations.systemStateFile, system: true).load(),
            userFile: locations.stateFile, systemFile: locations.systemStateFile)
    }

    /// An extension's status under these decisions, and why.
    public struct Evaluation: Sendable, Hashable {
        public var status: ExtensionStatus
        /// Whose decision the status follows: the approval that holds, or the ban; `nil` when
        /// nothing was decided (or the bundle is invalid).
        public var source: DecisionSource?
        /// The bundle's signature (``SignatureCheck/unsigned`` for an invalid bundle).
        public var signature: SignatureCheck
        /// For an approved external extension: the SHA-256 its executable must have when it is
        /// launched (from the pinned approval, or from the signature's listing).
        public var executableDigest: ContentDigest?
    }

    /// Weighs `entry`: invalid, forbidden, then bundled (approved implicitly) or the first
    /// approval that holds for its current contents (the system's, the user's, then trusted
    /// signers), then disabled.
    public func evaluate(_ entry: CatalogEntry, hasher: ContentHasher = .shared) -> Evaluation {
        let bundle: ValidatedBundle
        switch entry.bundle {
        case .failure(let problem): return Evaluation(status: .invalid(problem), source: nil, signature: .unsigned)
        case .success(let valid): bundle = valid
        }
        let identifier = bundle.manifest.identifier
        let signature = BundleSigning.check(bundle, hasher: hasher)
        if system.forbidden.contains(identifier) {
            return Evaluation(status: .forbidden(reason: "forbidden by the administrator (\(systemFile))"), source: .system, signature: signature)
        }
        if user.forbidden.contains(identifier) {
            return Evaluation(status: .forbidden(reason: "forbidden in \(userFile)"), source: .user, signature: signature)
        }
        let disabled = user.disabled.contains(identifier) || system.disabled.contains(identifier)
        if entry.origin.isBundled {
            return Evaluation(status: disabled ? .disabled : .enabled, source: .bundled, signature: signature)
        }
        var firstFailure: String?
        for (state, source) in [(system, DecisionSource.system), (user, .user)] {
            let outcome: Result<ContentDigest, Refusal>
            if let approval = state.approvals[identifier] {
                outcome = Self.check(approval, of: bundle, hasher: hasher)
            } else if let approval = state.signedApprovals[identifier] {
                outcome = Self.check(approval, of: bundle, signature: signature)
            } else {
                continue
            }
            switch outcome {
            case .success(let digest):
                return Evaluation(status: disabled ? .disabled : .enabled, source: source, signature: signature, executableDigest: digest)
            case .failure(.invalid(let problem)):
                return Evaluation(status: .invalid(problem), source: nil, signature: signature)
            case .failure(.unapproved(let reason)):
                firstFailure = firstFailure ?? reason
            }
        }
        if case .valid(let signed) = signature {
            for (state, source) in [(system, DecisionSource.systemSigner), (user, .userSigner)] where state.trustedSigners.contains(signed.signer) {
                if let digest = Self.signedDigest(of: bundle, in: signed) {
                    return Evaluation(status: disabled ? .disabled : .enabled, source: source, signature: signature, executableDigest: digest)
                }
            }
        }
        var reason = firstFailure ?? "not approved yet"
        if firstFailure == nil, case .broken(let why) = signature, !(system.trustedSigners.isEmpty && user.trustedSigners.isEmpty) {
            reason = "its signature is broken: \(why)"
        }
        return Evaluation(status: .unapproved(reason: reason), source: nil, signature: signature)
    }

    /// Why an approval does not hold.
    enum Refusal: Error {
        case unapproved(String)
        case invalid(CatalogProblem)
    }

    /// A pinned approval holds when the executable and manifest hash as approved.
    static func check(_ approval: ApprovalState.Approval, of bundle: ValidatedBundle, hasher: ContentHasher) -> Result<ContentDigest, Refusal> {
        do throws(CatalogProblem) {
            let current = try ExtensionCatalog.currentApproval(of: bundle, hasher: hasher)
            if current.executable != approval.executable { return .failure(.unapproved("the executable changed since it was approved")) }
            if current.manifest != approval.manifest { return .failure(.unapproved("the manifest changed since it was approved")) }
            return .success(current.executable)
        } catch {
            return .failure(.invalid(error))
        }
    }

    /// A signed approval holds when the bundle's signature verifies, is the approved signer's,
    /// and its version is not lower than the approved one.
    static func check(_ approval: ApprovalState.SignedApproval, of bundle: ValidatedBundle, signature: SignatureCheck) -> Result<ContentDigest, Refusal> {
        switch signature {
        case .unsigned:
            return .failure(.unapproved("it is not signed, and it was approved for bundles signed by \(approval.signer)"))
        case .broken(let reason):
            return .failure(.unapproved("its signature is broken: \(reason)"))
        case .valid(let signed):
            guard signed.signer == approval.signer else {
                return .failure(.unapproved("it is signed by another key (\(signed.signer)); it was approved for bundles signed by \(approval.signer)"))
            }
            guard ExtensionVersion.isAtLeast(signed.version, approval.version) else {
                return .failure(.unapproved("version \(signed.version) is lower than the approved \(approval.version) (a rollback)"))
            }
            guard let digest = signedDigest(of: bundle, in: signed) else {
                return .failure(.unapproved("its signature does not list the executable \(bundle.manifest.executable) as a file"))
            }
            return .success(digest)
        }
    }

    /// The executable's digest as the signature lists it (at its real path inside the bundle).
    static func signedDigest(of bundle: ValidatedBundle, in signature: BundleSignature) -> ContentDigest? {
        guard bundle.realPath != "/", FilePaths.isBelow(bundle.executablePath, bundle.realPath),
              case .file(_, let digest) = signature.entry(
                  String(Substring(Substring(bundle.executablePath).utf8.dropFirst(bundle.realPath.utf8.count + 1))))?.kind
        else { return nil }
        return digest
    }
}
