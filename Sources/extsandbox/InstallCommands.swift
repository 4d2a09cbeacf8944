import SandboxExec
import ArgumentParser
import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxSystem

/// `extsandbox install BUNDLE [--system] [--approve]`
struct InstallCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "install",
        abstract: "Install an extension bundle for you (or, with --system, for every user), after showing what it may do.",
        discussion: """
            Validates the bundle and its signature (a broken signature is refused; an unsigned \\
            bundle is installed and approved by its hashes), shows what it will be able to do \\
            (its point and host, the point's security level and what that level allows, its \\
            resources, its network) and copies it into the per-user extensions directory \\
            ($XDG_DATA_HOME/extsandbox/extensions; the last of $EXTSANDBOX_EXTENSION_DIRS) or, \\
            with --system, the system one (/usr/local/lib/extsandbox/extensions; the first of \\
            $EXTSANDBOX_EXTENSION_DIRS). The copy is built under a hidden name and renamed into \\
            place, so running hosts see the whole bundle at once, never part of it; a bundle \\
            with the same identifier there is replaced. --approve approves it as \\
            `extsandbox approve` would (with --system, for every user).

            --json prints one object with these stable fields: identifier, name, version, point, \\
            host, level, levelDescription, network, resources, signer (absent when unsigned), \\
            path (where it was installed), replaced (whether a bundle was there), approved.

            Example:
              extsandbox install ./upcase.appex --approve
            """)

    @Argument(help: "The bundle directory to install (its name ends in .appex).", completion: .directory)
    var bundle: String

    @Flag(name: .long, help: "Install for every user, in the system directory (root only).")
    var system = false

    @Flag(name: .long, help: "Also approve it.")
    var approve = false

    @Flag(name: .long, help: "Print a JSON object instead of text.")
    var json = false

    struct Result: Encodable {
        var identifier: String
        var name: String
        var version: String
        var point: String
        var host: String?
        var level: String?
        var levelDescription: String?
        var network: String
        var resources: [String]
        var signer: String?
        var path: String
        var replaced: Bool
        var approved: Bool
    }

    func run() throws {
        let locations = ExtensionLocations.standard(hostBundle: nil)
        if system { try ExtensionCommands.requireRoot(for: locations.installDirectory(system: true) ?? "the system extensions directory") }
        let source = try Self.validated(bundle)
        let signature = BundleSigning.check(source)
        if case .broken(let reason) = signature {
            printError("\(bundle): its signature is broken: \(reason)", hint: "install the bundle as its developer shipped it, or ask them to sign it again")
            throw ExitCode.failure
        }
        let inventory = try ExtensionCommands.inventory()
        let identifier = source.manifest.identifier
        guard let directory = locations.installDirectory(system: system) else {
            printError("no extensions directory to install into (EXTSANDBOX_EXTENSION_DIRS is empty)")
            throw ExitCode.failure
        }
        let existing = inventory.items(withIdentifier: identifier).filter { !$0.entry.origin.isBundled }
        // Directories by bytes, as the kernel tells them apart: as strings, a copy in a location
        // spelled alike ("\u{E9}" and "e\u{301}") would be taken for one here, and missed.
        if let other = existing.first(where: { !FilePaths.isSame(FilePaths.directory(of: $0.entry.path), directory) }),
           let otherIndex = locations.external.firstIndex(where: { FilePaths.isSame($0, FilePaths.directory(of: other.entry.path)) }),
           let index = locations.external.firstIndex(where: { FilePaths.isSame($0, directory) }), otherIndex < index {
            printError("\(identifier) is already installed at \(other.entry.path), which comes first: a copy here would be invalid",
                       hint: "uninstall it there first (extsandbox uninstall \(identifier)\(system ? "" : " as its owner")), or install with --system")
            throw ExitCode.failure
        }
        let target = existing.first { FilePaths.isSame(FilePaths.directory(of: $0.entry.path), directory) }
        let name = target.map { FilePaths.lastComponent($0.entry.path) }
            ?? (FilePaths.hasSuffix(FilePaths.lastComponent(source.path), "." + ExtensionLocations.bundleExtension)
                ? FilePaths.lastComponent(source.path) : identifier + "." + ExtensionLocations.bundleExtension)
        let owner = inventory.items.compactMap { item -> (String?, ExtensionPointDeclaration)? in
            guard let point = item.point, point.name == source.manifest.point else { return nil }
            return (item.host, point)
        }.first
        let declarations = ExtensionCatalog.declarations(in: locations.pointDirectories).files
        let declared = declarations.lazy.compactMap { file in file.points.first { $0.name == source.manifest.point }.map { (file.hostIdentifier, $0) } }.first
        let point = owner?.1 ?? declared?.1
        let host = owner?.0 ?? declared?.0
        let level = point?.securityLevel
        let policy = level.flatMap { try? PolicyLoader.load(nameOrPath: $0, searchPath: PolicyCommand.searchPath) }

        // The staged copy is weighed (and its approval made) before it is renamed into place:
        // a concurrent install may replace the installed path at any time after.
        enum Approval { case pinned(ApprovalState.Approval), signed(ApprovalState.SignedApproval) }
        var approval: Approval?
        let installed: String
        do throws(CatalogProblem) {
            installed = try BundleInstaller.install(source.path, into: directory, as: name) { (staged: String) throws(CatalogProblem) in
                guard approve else { return }
                let copy = try BundleValidator.validate(bundleAt: staged).get()
                switch BundleSigning.check(copy) {
                case .valid(let signed): approval = .signed(.init(signer: signed.signer, version: signed.version))
                case .unsigned: approval = .pinned(try ExtensionCatalog.currentApproval(of: copy))
                case .broken(let reason): throw CatalogProblem(.broken, file: staged, "the copy's signature does not hold (\(reason)): not installed")
                }
            }
        } catch {
            printError("\(error)", hint: ErrorAdvice.catalog(error))
            throw ExitCode.failure
        }
        switch approval {
        case .signed(let signed)?:
            try ExtensionCommands.update(system: system) { state in
                state.approvals[identifier] = nil
                state.signedApprovals[identifier] = signed
            }
        case .pinned(let pinned)?:
            try ExtensionCommands.update(system: system) { state in
                state.signedApprovals[identifier] = nil
                state.approvals[identifier] = pinned
            }
        case nil:
            break
        }
        let approved = approval != nil
        let result = Result(
            identifier: identifier, name: source.manifest.displayName, version: source.manifest.version, point: source.manifest.point,
            host: host, level: level, levelDescription: policy.map { $0.description.split(whereSeparator: \.isNewline).joined(separator: " ") },
            network: "none (its own network namespace, loopback only)", resources: source.manifest.resources,
            signer: signature.signer.map(\.description), path: installed, replaced: target != nil, approved: approved)
        if json {
            try JSONOutput.print(result)
            return
        }
        print("\(target == nil ? "installed" : "updated") \(identifier) \(result.version) (\(result.name)) at \(installed)")
        print("  point:     \(result.point)\(host.map { " of \($0)" } ?? " (no installed host declares it yet)")")
        print("  level:     \(level ?? "unknown until its host is installed")")
        if let description = result.levelDescription { print("             \(description)") }
        if let limits = policy?.limits {
            var parts: [String] = []
            if let memory = limits.memoryBytes { parts.append("memory \(memory >> 20) MiB") }
            if let processes = limits.processes { parts.append("\(processes) processes") }
            if let cpu = limits.cpuSeconds { parts.append("\(cpu) s of CPU") }
            if !parts.isEmpty { print("  limits:    \(parts.joined(separator: ", "))") }
        }
        print("  network:   \(result.network)")
        print("  resources: \(result.resources.isEmpty ? "none" : result.resources.joined(separator: ", ") + " (read-only, at /extension/…)")")
        print("  signer:    \(result.signer ?? "unsigned (an approval pins its executable and manifest)")")
        if approved {
            print("approved \(identifier)\(system ? " for every user" : "")")
        } else {
            print("not approved yet: extsandbox approve \(identifier)\(system ? " --system" : "")")
        }
    }

    static func validated(_ path: String) throws -> ValidatedBundle {
        switch BundleValidator.validate(bundleAt: path) {
        case .failure(let problem):
            printError("\(problem)", hint: ErrorAdvice.catalog(problem))
            throw ExitCode.failure
        case .success(let bundle):
            return bundle
        }
    }
}

/// `extsandbox uninstall ID`
struct UninstallCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "uninstall",
        abstract: "Remove an installed external extension.",
        discussion: """
            Renames the bundle out of its directory (running hosts see it gone at once; the next \\
            launch is refused, running processes keep running until their host ends them) and \\
            deletes it. Its private container, if its point gave it one, stays (a reinstall or \\
            an update keeps its data): `extsandbox reset ID` empties it. The approval stays in \\
            the approvals file, so reinstalling the same (or, when signed, a later) version \\
            needs no new approval: `extsandbox revoke ID` removes it. Extensions bundled with \\
            their host are removed with the host.
            """)

    @Argument(help: "The extension's identifier.", completion: CompletionCandidates.extensionIdentifier)
    var identifier: String

    @Flag(name: .long, help: "Print a JSON object instead of text (fields: identifier, path, approvalKept, container: the private container's path, absent when it has none).")
    var json = false

    struct Result: Encodable {
        var identifier: String
        var path: String
        var approvalKept: Bool
        var container: String?
    }

    func run() throws {
        let inventory = try ExtensionCommands.inventory()
        let matches = inventory.items(withIdentifier: identifier)
        guard let item = matches.first(where: { !$0.entry.origin.isBundled }) else {
            if let bundled = matches.first {
                printError("\(identifier) is part of its host's bundle (\(bundled.entry.path)): it goes with the host",
                           hint: "extsandbox disable \(identifier) turns it off")
            } else {
                printError("no installed extension has the identifier \(identifier)", hint: "`extsandbox list --all` shows every installed extension")
            }
            throw ExitCode.failure
        }
        do throws(CatalogProblem) {
            try BundleInstaller.uninstall(item.entry.path)
        } catch {
            printError("\(error)", hint: geteuid() != 0 ? "an extension installed for every user is removed by root" : nil)
            throw ExitCode.failure
        }
        let saved = ExtensionCommands.savedState()
        let kept = saved?.approvals[identifier] != nil || saved?.signedApprovals[identifier] != nil
        let containers = inventory.locations.containers
        let name = ExtensionCommands.containerName(of: item, identifier: identifier)
        let usage = name.flatMap { containers.usage($0) }
        let containerPath = usage == nil ? nil : name.map { containers.path(of: $0) }
        if json {
            try JSONOutput.print(Result(identifier: identifier, path: item.entry.path, approvalKept: kept, container: containerPath))
            return
        }
        print("uninstalled \(identifier) (removed \(item.entry.path))")
        if let containerPath, let usage {
            print("Its container (\(ExtensionCommands.size(usage.bytes)), \(containerPath)) stays, so a reinstall keeps its data: extsandbox reset \(identifier) empties it.")
        } else {
            print("It has no container: no data of it is left.")
        }
        if kept { print("Its approval stays in \(inventory.locations.stateFile): extsandbox revoke \(identifier) removes it.") }
    }
}
