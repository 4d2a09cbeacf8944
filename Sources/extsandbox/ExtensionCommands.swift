import SandboxExec
import ArgumentParser
import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy

/// The owner's decisions on installed extensions (`extsandbox approve|revoke|forbid|enable|disable`),
/// and what they share with `list` (ListCommand.swift)
/// (docs/extensions.md).
enum ExtensionCommands {
    static let locationHelp = """
        Extensions are found in each installed host's Extensions/ directory (hosts are known \
        by their declaration files, *.appext, in /usr/local/lib/extsandbox/points and \
        $XDG_DATA_HOME/extsandbox/points, or $EXTSANDBOX_POINT_DIRS), in \
        /usr/local/lib/extsandbox/extensions and $XDG_DATA_HOME/extsandbox/extensions (or \
        $EXTSANDBOX_EXTENSION_DIRS). The owner's choices are kept in \
        $XDG_STATE_HOME/extsandbox/approvals (or $EXTSANDBOX_STATE_FILE), the administrator's \
        for every user in /etc/extsandbox/approvals (or $EXTSANDBOX_SYSTEM_APPROVALS).
        """

    static let choiceJSONHelp = """
        --json prints one object with these stable fields: identifier (absent for --signer), \
        action (approve, revoke, enable, disable, forbid or lift), changed (false when it was \
        so already), scope (user, or system for the administrator's file), and for approve: \
        approval (pinned, signed, signer for a trusted key, or implicit for an extension bundled \
        with its host), executable and manifest (the pinned SHA-256 digests, sha256:<64 hex>; \
        only when pinned), signer (ed25519:<64 hex>) and version (the lowest version still \
        approved; only when signed), disabled (whether the extension is still disabled).
        """

    /// What `approve`, `revoke`, `enable` and `disable` did, as their `--json` prints it.
    struct ChoiceResult: Encodable {
        var identifier: String?
        var action: String
        var changed: Bool
        var scope: String = "user"
        var approval: String?
        var executable: String?
        var manifest: String?
        var signer: String?
        var version: String?
        var disabled: Bool?
    }

    /// Prints `result` as JSON, or else `text` (lines for people).
    static func report(_ result: ChoiceResult, json: Bool, text: [String]) throws {
        if json {
            try JSONOutput.print(result)
        } else {
            for line in text { print(line) }
        }
    }

    static func inventory() throws -> ExtensionInventory {
        do throws(CatalogProblem) {
            // Hashing every external bundle's executable can take a while: say so on a terminal.
            let progress = ProgressLine("reading installed extensions")
            defer { progress.finish() }
            return try ExtensionInventory.load(.standard(hostBundle: nil))
        } catch {
            printError("\(error)", hint: ErrorAdvice.catalog(error))
            throw ExitCode.failure
        }
    }

    /// The one extension with this identifier, or an error.
    static func find(_ identifier: String, in inventory: ExtensionInventory) throws -> ExtensionInventory.Item {
        let matches = inventory.items(withIdentifier: identifier)
        guard let item = matches.first(where: { if case .invalid = $0.status { return false } else { return true } }) ?? matches.first else {
            printError("no installed extension has the identifier \(identifier)",
                       hint: "`extsandbox list --all` shows every installed extension with its identifier")
            throw ExitCode.failure
        }
        return item
    }

    /// The name of `item`'s private container (bundled extensions' carry their host's identifier).
    static func containerName(of item: ExtensionInventory.Item, identifier: String) -> String? {
        try? ExtensionContainers.name(identifier: identifier, bundledWith: item.entry.origin.isBundled ? item.host : nil)
    }

    /// `bytes` for people: `0 B`, `12 KiB`, `3.5 MiB`.
    static func size(_ bytes: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes), unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        if unit == 0 || value >= 10 { return "\(Int(value.rounded())) \(units[unit])" }
        return "\((value * 10).rounded() / 10) \(units[unit])"
    }

    /// The owner's choices as saved; nil when there are none yet or they cannot be read (the
    /// update that follows says why).
    static func savedState() -> ApprovalState? {
        try? ApprovalStore(path: ExtensionLocations.standard(hostBundle: nil).stateFile).load()
    }

    /// Changes the owner's choices for `identifier`. Unless the saved choices mention it already
    /// (`known`), an installed extension must have that identifier.
    static func update(_ identifier: String, known: Bool, _ change: (inout ApprovalState) -> Void) throws {
        if !known { _ = try find(identifier, in: try inventory()) }
        try update(change)
    }

    static func update(system: Bool = false, _ change: (inout ApprovalState) -> Void) throws {
        let locations = ExtensionLocations.standard(hostBundle: nil)
        if system { try requireRoot(for: locations.systemStateFile) }
        let store = system ? ApprovalStore(path: locations.systemStateFile, system: true) : ApprovalStore(path: locations.stateFile)
        do throws(CatalogProblem) {
            try store.update { (state: inout ApprovalState) throws(CatalogProblem) in change(&state) }
        } catch {
            printError("\(error)", hint: ErrorAdvice.catalog(error))
            throw ExitCode.failure
        }
    }
}

extension ExtensionCommands {
    /// `approve` and `revoke` take an identifier or `--signer KEY`, not both.
    static func validate(identifier: String?, signer: String?) throws {
        guard (identifier == nil) != (signer == nil) else { throw ValidationError("give either an extension's identifier or --signer KEY") }
        if let signer, SignerKey(signer) == nil { throw ValidationError("--signer takes a public key: ed25519: and 64 lowercase hex digits") }
    }

    /// The administrator's file is root's: say so before trying, rather than failing on EACCES.
    static func requireRoot(for file: String) throws {
        guard geteuid() == 0 else {
            printError("\(file) holds the administrator's decisions for every user: only root may change it",
                       hint: "run this as root (sudo), or leave out --system to decide for yourself")
            throw ExitCode.failure
        }
    }
}

/// `extsandbox approve ID`, `approve --signer KEY`
struct ApproveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "approve",
        abstract: "Approve an external extension (or trust a developer's key), for you or, as root, for every user.",
        discussion: """
            An unsigned extension's approval is pinned to the SHA-256 of its executable and \
            manifest as they are now: if either changes, it is unapproved again. A signed \
            extension's approval is pinned to its signer (the key in its valid signature), its \
            identifier and its version: updates signed by the same key with a version not lower \
            stay approved; another key, a broken or missing signature, or a lower version \
            (a rollback) make it unapproved again. A bundle whose signature is broken cannot be \
            approved. Extensions inside their host's bundle are approved implicitly. \
            --signer KEY trusts a developer key instead: every extension that KEY validly signs is \
            approved, now and later (off unless you do this). --system writes the \
            administrator's file, for every user (root only); it never overrides a ban (forbid).

            Examples:
              extsandbox approve org.example.upcase
              extsandbox approve --signer ed25519:3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29
              sudo extsandbox approve --system org.example.upcase

            \(ExtensionCommands.choiceJSONHelp)

            \(ExtensionCommands.locationHelp)
            """)

    @Argument(help: "The extension's identifier.", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String?

    @Option(name: .long, help: "Trust this developer key (ed25519:<64 hex>) for every extension it signs.")
    var signer: String?

    @Flag(name: .long, help: "Decide for every user, in the administrator's file (root only).")
    var system = false

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    func validate() throws { try ExtensionCommands.validate(identifier: identifier, signer: signer) }

    func run() throws {
        let scope = system ? "system" : "user"
        if let signer, let key = SignerKey(signer) {
            var changed = false
            try ExtensionCommands.update(system: system) { changed = $0.trustedSigners.insert(key).inserted }
            try ExtensionCommands.report(
                .init(action: "approve", changed: changed, scope: scope, approval: "signer", signer: "\(key)"), json: json,
                text: ["trusted \(key)\(system ? " for every user" : ""): every extension it validly signs is approved"])
            return
        }
        guard let identifier else { return }
        if system { try ExtensionCommands.requireRoot(for: ExtensionLocations.standard(hostBundle: nil).systemStateFile) }
        let item = try ExtensionCommands.find(identifier, in: try ExtensionCommands.inventory())
        let bundle: ValidatedBundle
        switch item.status {
        case .invalid(let problem):
            printError("\(identifier) is invalid and cannot be approved: \(problem)", hint: ErrorAdvice.catalog(problem))
            throw ExitCode.failure
        case .forbidden(let reason) where item.source == .system:
            printError("\(identifier) is \(reason): no approval overrides a ban", hint: "only root can lift it: extsandbox forbid --lift \(identifier)")
            throw ExitCode.failure
        default:
            bundle = try item.entry.bundle.get()
        }
        let disabled: Bool
        if case .disabled = item.status { disabled = true } else { disabled = false }
        if item.entry.origin.isBundled {
            try ExtensionCommands.report(
                .init(identifier: identifier, action: "approve", changed: false, scope: scope, approval: "implicit", disabled: disabled), json: json,
                text: ["\(identifier) is bundled with \(item.host ?? "its host"): approved implicitly"])
            return
        }
        var text: [String]
        var result: ExtensionCommands.ChoiceResult
        switch item.signature {
        case .broken(let reason):
            printError("\(identifier) cannot be approved: its signature is broken: \(reason)",
                       hint: "reinstall the bundle as its developer shipped it, or ask them to sign it again")
            throw ExitCode.failure
        case .valid(let signature):
            let approval = ApprovalState.SignedApproval(signer: signature.signer, version: signature.version)
            var previous: ApprovalState.SignedApproval?
            try ExtensionCommands.update(system: system) { state in
                previous = state.signedApprovals[identifier]
                state.approvals[identifier] = nil
                state.signedApprovals[identifier] = approval
            }
            text = ["approved \(identifier) signed by \(approval.signer), version \(approval.version) and later updates it signs"]
            result = .init(identifier: identifier, action: "approve", changed: previous != approval, scope: scope, approval: "signed",
                           signer: "\(approval.signer)", version: approval.version, disabled: disabled)
        case .unsigned:
            let approval: ApprovalState.Approval
            do throws(CatalogProblem) {
                let progress = ProgressLine("hashing the executable and manifest of \(identifier)")
                defer { progress.finish() }
                approval = try ExtensionCatalog.currentApproval(of: bundle)
            } catch {
                printError("\(error)", hint: ErrorAdvice.catalog(error))
                throw ExitCode.failure
            }
            var previous: ApprovalState.Approval?
            try ExtensionCommands.update(system: system) { state in
                previous = state.approvals[identifier]
                state.signedApprovals[identifier] = nil
                state.approvals[identifier] = approval
            }
            text = ["approved \(identifier) (executable \(approval.executable), manifest \(approval.manifest))"]
            result = .init(identifier: identifier, action: "approve", changed: previous != approval, scope: scope, approval: "pinned",
                           executable: "\(approval.executable)", manifest: "\(approval.manifest)", disabled: disabled)
        }
        if system { text[0] += " for every user" }
        if disabled { text.append("note: \(identifier) is disabled; extsandbox enable \(identifier) turns it on") }
        if case .forbidden(let reason) = item.status { text.append("note: \(identifier) is \(reason); the ban still wins") }
        try ExtensionCommands.report(result, json: json, text: text)
    }
}

/// `extsandbox revoke ID`, `revoke --signer KEY`
struct RevokeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke", abstract: "Withdraw the approval of an external extension, or the trust in a developer key.",
        discussion: "Running processes keep running; the next launch is refused. --system withdraws the administrator's (root only).\n\n\(ExtensionCommands.choiceJSONHelp)\n\n\(ExtensionCommands.locationHelp)")

    @Argument(help: "The extension's identifier.", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String?

    @Option(name: .long, help: "Stop trusting this developer key (ed25519:<64 hex>).")
    var signer: String?

    @Flag(name: .long, help: "Change the administrator's file (root only).")
    var system = false

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    func validate() throws { try ExtensionCommands.validate(identifier: identifier, signer: signer) }

    func run() throws {
        let scope = system ? "system" : "user"
        var changed = false
        if let signer, let key = SignerKey(signer) {
            try ExtensionCommands.update(system: system) { changed = $0.trustedSigners.remove(key) != nil }
            try ExtensionCommands.report(.init(action: "revoke", changed: changed, scope: scope, signer: "\(key)"), json: json,
                                         text: [changed ? "no longer trusting \(key)" : "\(key) was not trusted"])
            return
        }
        guard let identifier else { return }
        if system {
            try ExtensionCommands.update(system: true) { state in
                changed = state.approvals.removeValue(forKey: identifier) != nil
                changed = state.signedApprovals.removeValue(forKey: identifier) != nil || changed
            }
        } else {
            let saved = ExtensionCommands.savedState()
            let known = saved?.approvals[identifier] != nil || saved?.signedApprovals[identifier] != nil
            try ExtensionCommands.update(identifier, known: known) { state in
                changed = state.approvals.removeValue(forKey: identifier) != nil
                changed = state.signedApprovals.removeValue(forKey: identifier) != nil || changed
            }
        }
        try ExtensionCommands.report(.init(identifier: identifier, action: "revoke", changed: changed, scope: scope), json: json,
                                     text: [changed ? "revoked the approval of \(identifier)" : "\(identifier) was not approved"])
    }
}

/// `extsandbox forbid ID`, `forbid --lift ID`
struct ForbidCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forbid", abstract: "Forbid an extension for every user (root only); --lift ends the ban.",
        discussion: """
            Writes the administrator's file. A forbidden extension is never offered to a host nor \
            launched, bundled or external, whatever any approval (the user's or the system's) \
            says; `extsandbox list` shows it as forbidden. Running processes keep running; the \
            next launch is refused and monitors drop it at once.

            \(ExtensionCommands.choiceJSONHelp)

            \(ExtensionCommands.locationHelp)
            """)

    @Argument(help: "The extension's identifier (it need not be installed).", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String

    @Flag(name: .long, help: "Lift the ban instead.")
    var lift = false

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    func validate() throws {
        guard identifier.split(separator: ".").count >= 2, !identifier.contains(where: { $0 == " " || $0.isNewline }) else {
            throw ValidationError("\(identifier) is not an extension identifier (reverse-DNS, e.g. org.example.upcase)")
        }
    }

    func run() throws {
        var changed = false
        try ExtensionCommands.update(system: true) { state in
            changed = lift ? state.forbidden.remove(identifier) != nil : state.forbidden.insert(identifier).inserted
        }
        try ExtensionCommands.report(.init(identifier: identifier, action: lift ? "lift" : "forbid", changed: changed, scope: "system"), json: json,
                                     text: [lift ? (changed ? "lifted the ban on \(identifier)" : "\(identifier) was not forbidden")
                                                 : "forbade \(identifier) for every user"])
    }
}

/// `extsandbox enable ID`
struct EnableCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enable", abstract: "Turn a disabled extension back on.",
        discussion: "\(ExtensionCommands.choiceJSONHelp)\n\n\(ExtensionCommands.locationHelp)")

    @Argument(help: "The extension's identifier.", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    func run() throws {
        let disabled = ExtensionCommands.savedState()?.disabled.contains(identifier) == true
        var changed = false
        try ExtensionCommands.update(identifier, known: disabled) { changed = $0.disabled.remove(identifier) != nil }
        try ExtensionCommands.report(.init(identifier: identifier, action: "enable", changed: changed), json: json,
                                     text: ["enabled \(identifier)"])
    }
}

/// `extsandbox disable ID`
struct DisableCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disable", abstract: "Turn an extension off (bundled or external).",
        discussion: "Running processes keep running; hosts stop seeing it and the next launch is refused.\n\n\(ExtensionCommands.choiceJSONHelp)\n\n\(ExtensionCommands.locationHelp)")

    @Argument(help: "The extension's identifier.", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    func run() throws {
        var changed = false
        try ExtensionCommands.update(identifier, known: false) { changed = $0.disabled.insert(identifier).inserted }
        try ExtensionCommands.report(.init(identifier: identifier, action: "disable", changed: changed), json: json,
                                     text: ["disabled \(identifier)"])
    }
}
