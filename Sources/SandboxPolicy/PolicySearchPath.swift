import Glibc
import SandboxSystem

/// Where policies are looked up by name: directories in increasing precedence (the last
/// directory that has `NAME.yaml` wins, so an admin's copy in `/etc` overrides the shipped one).
///
/// Every directory on the path, every directory above it, and every policy file read from it must
/// pass ``TrustedPath``'s checks (owned by root or the caller, not writable by group or others);
/// a directory that fails them makes every lookup fail with a message naming the offending path,
/// rather than being skipped (a skipped admin directory could mean a weaker policy). A directory
/// that does not exist is skipped.
public struct PolicySearchPath: Sendable, Equatable {
    public var directories: [String]

    public init(directories: [String]) {
        self.directories = directories
    }

    /// The system-wide directory for admins' policies.
    public static let systemDirectory = "/etc/extsandbox/policies"

    /// The environment variable that names the policies directory in place of the install's
    /// (a checkout's `Policies` when running from the build tree: scripts/test, demo and bench set it).
    public static let directoryVariable = "EXTSANDBOX_POLICIES_DIR"

    /// The search path of a program installed at `executablePath` (the CLI, or a host using the
    /// ExtSandbox library): its install prefix's policies directory, then `/etc/extsandbox/policies`.
    ///
    /// The prefix's directory is `PREFIX/share/extsandbox/policies`, where PREFIX is the parent of
    /// the directory holding the executable, symbolic links resolved (`/usr/local` for
    /// `/usr/local/bin/extsandbox`). `$EXTSANDBOX_POLICIES_DIR`, when set and not empty, replaces
    /// it (the development convenience: it is explicit, and checked like any other directory).
    /// Nothing else is searched: not the executable's own directory, not its ancestors.
    public static func `default`(
        executablePath: String, environment: [String: String]? = nil
    ) -> PolicySearchPath {
        let environment = environment ?? SystemFiles.environment()
        let install: String
        if let explicit = environment[directoryVariable], !explicit.isEmpty {
            install = explicit
        } else {
            install = installDirectory(executablePath: executablePath)
        }
        return PolicySearchPath(directories: [install, systemDirectory])
    }

    /// `PREFIX/share/extsandbox/policies` for an executable at `PREFIX/bin/NAME`, or at
    /// `PREFIX/libexec/extsandbox/NAME` (the CLI's `extsandbox-commands`), symbolic links in
    /// `executablePath` resolved first.
    public static func installDirectory(executablePath: String) -> String {
        // Plain realpath: Foundation's URL path APIs cost a one-shot `extsandbox exec` a
        // noticeable share of its start-up.
        let exe = SystemFiles.realPath(executablePath) ?? TrustedPath.absolute(executablePath)
        let bin = FilePaths.directory(of: exe)
        var prefix = bin == "/" ? "/" : FilePaths.directory(of: bin)
        if FilePaths.lastComponent(bin) == "extsandbox", FilePaths.lastComponent(prefix) == "libexec" {
            prefix = FilePaths.directory(of: prefix)
        }
        return FilePaths.join(prefix, "share/extsandbox/policies")
    }

    /// The path of the running executable (`/proc/self/exe`), for ``default(executablePath:environment:)``.
    public static func currentExecutable() -> String {
        SystemFiles.linkTarget("/proc/self/exe") ?? CommandLine.arguments[0]
    }

    /// Whether a search-path directory can be used.
    public enum DirectoryStatus: Sendable, Equatable {
        case present
        /// It does not exist (it is skipped).
        case missing
        /// It, or a directory above it, fails the checks; the message says which and why.
        case refused(String)
    }

    /// Whether `directory` exists and passes the checks.
    public static func status(ofDirectory directory: String) -> DirectoryStatus {
        do {
            try TrustedPath.openDirectory(directory).close()
            return .present
        } catch .missing {
            return .missing
        } catch {
            return .refused(error.description)
        }
    }

    /// Every policy along the path: name → file (later directories override earlier ones).
    public func availablePolicies() -> [String: String] {
        Dictionary(entries().filter(\.isEffective).map { ($0.name, $0.file) }, uniquingKeysWith: { _, last in last })
    }

    /// One policy file found along the path.
    public struct Entry: Sendable, Equatable {
        /// The policy's name (its file name without `.yaml`).
        public var name: String
        public var file: String
        /// The search-path directory it is in.
        public var directory: String
        /// Whether this is the file the name resolves to; `false` when a later directory has a
        /// file of the same name (this one is shadowed).
        public var isEffective: Bool
    }

    /// Every policy file in every usable directory of the path (see ``status(ofDirectory:)`` for
    /// the others), in path order (then by name), each marked as effective or shadowed by a later
    /// directory's file of the same name.
    public func entries() -> [Entry] {
        var out: [Entry] = []
        for dir in directories {
            guard let directory = try? TrustedPath.openDirectory(dir) else { continue }
            defer { directory.close() }
            for file in Self.names(in: directory).sorted() where FilePaths.hasSuffix(file, ".yaml") && file.utf8.first != UInt8(ascii: ".") {
                var info = stat()
                guard fstatat(directory.fd.rawValue, file, &info, 0) == 0, info.st_mode & S_IFMT != S_IFDIR else { continue }
                out.append(Entry(name: FilePaths.droppingSuffix(file, ".yaml"), file: FilePaths.join(dir, file), directory: dir, isEffective: true))
            }
        }
        var winner: [String: Int] = [:]
        for (i, e) in out.enumerated() { winner[e.name] = i }
        for i in out.indices { out[i].isEffective = winner[out[i].name] == i }
        return out
    }

    /// The names in an open directory.
    private static func names(in directory: TrustedPath.Directory) -> [String] {
        SystemFiles.entries(of: directory.fd) ?? []
    }

    /// The file of policy `name`: the last directory that has `name.yaml`.
    public func locate(name: String) throws(PolicyError) -> String {
        try locate(name: name, excluding: nil)
    }

    /// The file of policy `name`, skipping the file whose canonical path is `excluded` (so a
    /// policy can extend the one it overrides: `/etc/…/standard.yaml` saying `extends: standard`
    /// gets the shipped `standard.yaml`). A directory on the path that fails the checks is an
    /// error, not skipped.
    func locate(name: String, excluding excluded: String?) throws(PolicyError) -> String {
        guard !name.isEmpty, !FilePaths.containsSlash(name), name.utf8.first != UInt8(ascii: ".") else {
            throw PolicyError(file: name, message: "not a policy name (names are file names without .yaml)")
        }
        var found: String?
        for dir in directories {
            let directory: TrustedPath.Directory
            do {
                directory = try TrustedPath.openDirectory(dir)
            } catch .missing {
                continue
            } catch {
                throw PolicyError(file: dir, message: "cannot look up policy \"\(name)\" in this directory: \(error.description)")
            }
            defer { directory.close() }
            // The file itself is checked when it is read.
            var info = stat()
            let candidate = FilePaths.join(dir, name + ".yaml")
            if fstatat(directory.fd.rawValue, name + ".yaml", &info, 0) == 0, info.st_mode & S_IFMT != S_IFDIR,
                excluded == nil || PolicyResolver.canonical(candidate) != excluded
            {
                found = candidate
            }
        }
        if let found { return found }
        let available = availablePolicies()
        let hint = Suggest.hint(for: name, in: available.keys)
        let places = directories.isEmpty ? "(no directories)" : directories.joined(separator: ", ")
        let other = excluded == nil ? "" : " other than the file itself"
        let development = available.isEmpty ? Self.developmentHint : ""
        throw PolicyError(file: name, message: "no policy named \"\(name)\"\(other)\(hint) (looked for \(name).yaml in: \(places))\(development)")
    }

    /// For a name found nowhere: how a build tree finds its checkout's policies.
    static let developmentHint =
        "; to use a checkout's policies (running from a build tree), set \(directoryVariable)=CHECKOUT/Policies"
}
