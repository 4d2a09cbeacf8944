import SandboxExec
import ArgumentParser
import ExtensionCatalog

/// `extsandbox reset ID`: empties an extension's private container (docs/containers.md).
struct ResetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reset",
        abstract: "Empty an extension's private container.",
        discussion: """
            Removes everything the extension kept in its container; it gets an empty one at its \
            next launch. Refused while a host runs the extension. Works for an extension that \
            is no longer installed too: removing a bundle leaves its container (so an update or \
            a reinstall keeps the data) until it is reset.

            Containers are kept in $XDG_DATA_HOME/extsandbox/containers (or \
            $EXTSANDBOX_CONTAINER_DIR); an extension bundled with a host has one per host.

            --json prints one object with these stable fields: identifier, container (its path), \
            changed (false when there was nothing to remove).
            """)

    @Argument(help: "The extension's identifier.")
    var identifier: String

    @Flag(name: .long, help: "Print a JSON object instead of a sentence.")
    var json = false

    struct Result: Encodable {
        var identifier: String
        var container: String
        var changed: Bool
    }

    func run() throws {
        let inventory = try ExtensionCommands.inventory()
        let containers = inventory.locations.containers
        // Installed: its own container (a bundled one's carries its host). No longer installed:
        // the container an external extension had.
        var names: [String] = inventory.items(withIdentifier: identifier).compactMap {
            ExtensionCommands.containerName(of: $0, identifier: identifier)
        }
        if names.isEmpty {
            do throws(CatalogProblem) {
                names = [try ExtensionContainers.name(identifier: identifier)]
            } catch {
                printError("\(error)")
                throw ExitCode.failure
            }
        }
        var changed = false
        for name in names {
            do throws(CatalogProblem) {
                changed = try containers.reset(name) || changed
            } catch {
                printError("\(identifier): \(error)")
                throw ExitCode.failure
            }
        }
        let paths = names.map { containers.path(of: $0) }
        if json {
            try JSONOutput.print(Result(identifier: identifier, container: paths.joined(separator: ":"), changed: changed))
        } else {
            print(changed ? "emptied the container of \(identifier) (\(paths.joined(separator: ", ")))"
                          : "\(identifier) has no container to empty")
        }
    }
}
