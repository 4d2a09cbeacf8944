import SandboxExec
import ArgumentParser
import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy

/// `extsandbox list`
struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List installed extensions, their point, state and security level.",
        discussion: """
            State is one of: enabled (hosts see it and may launch it), disabled (the owner \
            turned it off), unapproved (installed outside its host's bundle and not approved \
            for its current executable and manifest, or for its signer and version), forbidden \
            (banned by the administrator for every user: no approval overrides it), invalid (broken, inconsistent or unsafe, \
            with the file, line and reason; never launched). Invalid bundles are shown with --all.

            \(ExtensionCommands.locationHelp)

            --json prints an array with one object per extension; these field names are stable \
            (a field whose value is unknown, e.g. for a bundle whose manifest cannot be read, is \
            left out): identifier, name (display name), version, point, host (the host that \
            declares the point), state (enabled, disabled, unapproved or invalid), reason (why it \
            is unapproved, forbidden or invalid), level (the point's security level), origin \
            (bundled or external), path (the bundle's directory), signer (ed25519:<64 hex> when \
            the bundle's signature verifies), signature (valid, broken or unsigned), decidedBy \
            (whose decision the state follows: bundled, user, system, user-signer or \
            system-signer, for a trusted key; left out when nothing was decided), containerBytes \
            and containerInodes (what the extension's private container takes on disk; absent \
            when it has none yet), sharedContainer (the shared container its point declares).

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
        var signer: String?
        var signature: String
        var decidedBy: String?
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
            case .unapproved(let why), .forbidden(let why): reason = why
            case .invalid(let problem): reason = problem.description
            default: reason = nil
            }
            let usage = manifest.flatMap { ExtensionCommands.containerName(of: item, identifier: $0.identifier) }
                .flatMap { inventory.locations.containers.usage($0) }
            return Row(identifier: manifest?.identifier, name: manifest?.displayName, version: manifest?.version,
                       point: manifest?.point, host: item.host, state: item.status.name, reason: reason,
                       level: item.point?.securityLevel, origin: item.entry.origin.isBundled ? "bundled" : "external",
                       path: item.entry.path, signer: item.signature.signer.map(\.description),
                       signature: Self.signatureName(item.signature), decidedBy: item.source?.rawValue,
                       containerBytes: usage?.bytes, containerInodes: usage?.inodes,
                       sharedContainer: item.point?.sharedContainer)
        }
        if json {
            try JSONOutput.print(rows)
            return
        }
        if rows.isEmpty {
            print("No extensions installed.")
        } else {
            var table = Table(["IDENTIFIER", "POINT", "STATE", "LEVEL", "ORIGIN", "VERSION", "SOURCE", "CONTAINER"])
            for row in rows {
                var notes = row.reason.map { ["\(row.state == "invalid" ? "why" : "note"): \($0)"] } ?? []
                if let signer = row.signer { notes.append("signer: \(signer)") }
                table.add([row.identifier ?? "?", row.point ?? "?", row.state, row.level ?? "-", row.origin, row.version ?? "-", row.decidedBy ?? "-",
                           row.containerBytes.map(ExtensionCommands.size) ?? "-"],
                          colors: [2: Self.color(ofState: row.state)], notes: notes)
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
        case "invalid", "forbidden": return .red
        default: return .dim
        }
    }

    static func signatureName(_ check: SignatureCheck) -> String {
        switch check {
        case .valid: return "valid"
        case .broken: return "broken"
        case .unsigned: return "unsigned"
        }
    }
}
