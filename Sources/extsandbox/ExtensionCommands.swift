import ArgumentParser
import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy

/// The owner's view of installed extensions: `extsandbox list|approve|revoke|enable|disable`
/// (docs/extensions.md).
enum ExtensionCommands {
    static let locationHelp = """
        Extensions are found in each installed host's Extensions/ directory (hosts are known \
        by their declaration files, *.appext, in /usr/local/lib/extsandbox/points and \
        $XDG_DATA_HOME/extsandbox/points, or $EXTSANDBOX_POINT_DIRS), in \
        /usr/local/lib/extsandbox/extensions and $XDG_DATA_HOME/extsandbox/extensions (or \
        $EXTSANDBOX_EXTENSION_DIRS). The owner's choices are kept in \
        $XDG_STATE_HOME/extsandbox/approvals (or $EXTSANDBOX_STATE_FILE).
        """

    static let choiceJSONHelp = """
        --json prints one object with these stable fields: identifier, action (approve, revoke, \
        enable or disable), changed (false when it was so already), and for approve: approval \
        (pinned, or implicit for an extension bundled with its host), executable and manifest \
        (the pinned SHA-256 digests, sha256:<64 hex>; absent when implicit), disabled (whether \
        the extension is still disabled).
        """

    /// What `approve`, `revoke`, `enable` and `disable` did, as their `--json` prints it.
    struct ChoiceResult: Encodable {
        var identifier: String
        var action: String
        var changed: Bool
        var approval: String?
        var executable: String?
        var manifest: String?
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

    static func update(_ change: (inout ApprovalState) -> Void) throws {
        let store = ApprovalStore(path: ExtensionLocations.standard(hostBundle: nil).stateFile)
        do throws(CatalogProblem) {
            try store.update { (state: inout ApprovalState) throws(CatalogProblem) in change(&state) }
        } catch {
            printError("\(error)", hint: ErrorAdvice.catalog(error))
            throw ExitCode.failure
        }
    }
}

/// `extsandbox list`
struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List installed extensions, their point, state and security level.",
        discussion: """
            State is one of: enabled (hosts see it and may launch it), disabled (the owner \
            turned it off), unapproved (installed outside its host's bundle and not approved \
            for its current executable and manifest), invalid (broken, inconsistent or unsafe, \
            with the file, line and reason; never launched). Invalid bundles are shown with --all.

            \(ExtensionCommands.locationHelp)

            --json prints an array with one object per extension; these field names are stable \
            (a field whose value is unknown, e.g. for a bundle whose manifest cannot be read, is \
            left out): identifier, name (display name), version, point, host (the host that \
            declares the point), state (enabled, disabled, unapproved or invalid), reason (why it \
            is unapproved or invalid), level (the point's security level), origin (bundled or \
            external), path (the bundle's directory), containerBytes and containerInodes (what \
            the extension's private container takes on disk; absent when it has none yet), \
            sharedContainer (the shared container its point declares).

            The CONTAINER column shows the size of each extension's private container \
            ($XDG_DATA_HOME/extsandbox/containers, or $EXTSANDBOX_CONTAINER_DIR); removing a \
            bundle leaves its container, until `extsandbox reset ID`.

            Output: an aligned table, the STATE column coloured when standard output is a \
            terminal and NO_COLOR is not set, control characters from manifests and declarations \
            shown escaped (\\e, \\x9b, \\u{202e}; --json has the exact values); a progress line \
            on standard error (a terminal only) while reading the bundles takes longer than a second.

            Examples:
              extsandbox list
              extsandbox list --all --json
            """)

    @Flag(name: .long, help: "Also list invalid bundles, with why.")
    var all = false

    @Flag(name: .long, help: "Print a JSON array instead of a table.")
    var json = false

    struct Row: Codable {
        var identifier: String?
        var name: String?
        var version: String?
        var point: String?
        var host: String?
        var state: String
        var reason: String?
        var level: String?
        var origin: String
        var path: String
        var containerBytes: UInt64?
        var containerInodes: UInt64?
        var sharedContainer: String?
    }

    func run() throws {
        let inventory = try ExtensionCommands.inventory()
        for problem in inventory.declarationProblems { printError("ignoring a point declaration: \(problem)") }
        if let problem = inventory.declarationProblems.first { printError("hint: \(ErrorAdvice.catalog(problem))") }
        let shown = inventory.items.filter { all || $0.status.name != "invalid" }
        let rows = shown.map { item -> Row in
            let manifest = try? item.entry.bundle.get().manifest
            var reason: String?
            switch item.status {
            case .unapproved(let why): reason = why
            case .invalid(let problem): reason = problem.description
            default: reason = nil
            }
            let usage = manifest.flatMap { ExtensionCommands.containerName(of: item, identifier: $0.identifier) }
                .flatMap { inventory.locations.containers.usage($0) }
            return Row(identifier: manifest?.identifier, name: manifest?.displayName, version: manifest?.version,
                       point: manifest?.point, host: item.host, state: item.status.name, reason: reason,
                       level: item.point?.securityLevel, origin: item.entry.origin.isBundled ? "bundled" : "external",
                       path: item.entry.path, containerBytes: usage?.bytes, containerInodes: usage?.inodes,
                       sharedContainer: item.point?.sharedContainer)
        }
        if json {
            try JSONOutput.print(rows)
            return
        }
        if rows.isEmpty {
            print("No extensions installed.")
        } else {
            var table = Table(["IDENTIFIER", "POINT", "STATE", "LEVEL", "ORIGIN", "VERSION", "CONTAINER"])
            for row in rows {
                let note = row.reason.map { "\(row.state == "invalid" ? "why" : "note"): \($0)" }
                table.add([row.identifier ?? "?", row.point ?? "?", row.state, row.level ?? "-", row.origin, row.version ?? "-",
                           row.containerBytes.map(ExtensionCommands.size) ?? "-"],
                          colors: [2: Self.color(ofState: row.state)], notes: note.map { [$0] } ?? [])
            }
            print(table.render(), terminator: "")
        }
        let hidden = inventory.items.count - shown.count
        if hidden > 0 { print("\(hidden) invalid bundle\(hidden == 1 ? "" : "s") not shown (extsandbox list --all)") }
    }
}

extension ListCommand {
    static func color(ofState state: String) -> OutputStyle.Color {
        switch state {
        case "enabled": return .green
        case "unapproved": return .yellow
        case "invalid": return .red
        default: return .dim
        }
    }
}

/// `extsandbox approve ID`
struct ApproveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "approve",
        abstract: "Approve an external extension for its current executable and manifest.",
        discussion: """
            The approval is pinned to the SHA-256 of the extension's executable and manifest as \
            they are now: if either changes, the extension is unapproved again. Extensions inside \
            their host's bundle are approved implicitly.

            \(ExtensionCommands.choiceJSONHelp)

            \(ExtensionCommands.locationHelp)
            """)

    @Argument(help: "The extension's identifier.", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    func run() throws {
        let item = try ExtensionCommands.find(identifier, in: try ExtensionCommands.inventory())
        let bundle: ValidatedBundle
        switch item.status {
        case .invalid(let problem):
            printError("\(identifier) is invalid and cannot be approved: \(problem)", hint: ErrorAdvice.catalog(problem))
            throw ExitCode.failure
        default:
            bundle = try item.entry.bundle.get()
        }
        let disabled: Bool
        if case .disabled = item.status { disabled = true } else { disabled = false }
        if item.entry.origin.isBundled {
            try ExtensionCommands.report(
                .init(identifier: identifier, action: "approve", changed: false, approval: "implicit", disabled: disabled), json: json,
                text: ["\(identifier) is bundled with \(item.host ?? "its host"): approved implicitly"])
            return
        }
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
        try ExtensionCommands.update { state in
            previous = state.approvals[identifier]
            state.approvals[identifier] = approval
        }
        var text = ["approved \(identifier) (executable \(approval.executable), manifest \(approval.manifest))"]
        if disabled { text.append("note: \(identifier) is disabled; extsandbox enable \(identifier) turns it on") }
        try ExtensionCommands.report(
            .init(identifier: identifier, action: "approve", changed: previous != approval, approval: "pinned",
                  executable: "\(approval.executable)", manifest: "\(approval.manifest)", disabled: disabled),
            json: json, text: text)
    }
}

/// `extsandbox revoke ID`
struct RevokeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke", abstract: "Withdraw the approval of an external extension.",
        discussion: "Running processes keep running; the next launch is refused.\n\n\(ExtensionCommands.choiceJSONHelp)\n\n\(ExtensionCommands.locationHelp)")

    @Argument(help: "The extension's identifier.", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    func run() throws {
        let known = ExtensionCommands.savedState()?.approvals[identifier] != nil
        var changed = false
        try ExtensionCommands.update(identifier, known: known) { changed = $0.approvals.removeValue(forKey: identifier) != nil }
        try ExtensionCommands.report(.init(identifier: identifier, action: "revoke", changed: changed), json: json,
                                     text: [changed ? "revoked the approval of \(identifier)" : "\(identifier) was not approved"])
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
