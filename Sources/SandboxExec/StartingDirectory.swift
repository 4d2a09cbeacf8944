import Glibc
import SandboxPolicy
import SandboxSystem

/// Where `exec` starts the program when `--chdir` is not given: the caller's directory, at the
/// path a bind (the caller's or the policy's) shows it inside, as bwrap and firejail do; else `/`,
/// with a hint when the program was evidently given paths relative to the caller's directory.
enum StartingDirectory {
    /// What the sandbox provides itself before any bind (see MountPlan): only a bind below one
    /// of these shows a host directory there.
    static let providedMounts = ["/proc", "/dev", "/tmp"]

    /// The path inside at which `hostDirectory` (a real path, as `getcwd` gives it) is visible
    /// through `mounts` (applied parents first, a later mount of the same depth winning) and not
    /// hidden by `masked`, or `nil`. The same path is preferred when several binds show it.
    static func visiblePath(of hostDirectory: String, mounts: [MountEntry], masked: [String],
                            realPath: (String) -> String? = SystemFiles.realPath) -> String? {
        // Each mount's destination, and for a bind its source as the kernel would bind it.
        let entries: [(destination: String, source: String?)] = mounts.map { entry in
            switch entry {
            case .bind(let source, let destination, _, _):
                return (normalized(destination), realPath(source).map(normalized))
            case .tmpfs(let destination, _):
                return (normalized(destination), nil)
            }
        }
        var candidates: [String] = []
        for (index, entry) in entries.enumerated() {
            guard let source = entry.source, covers(source, hostDirectory) else { continue }
            // Cut by bytes, as `covers` matched them.
            let rest = Substring(hostDirectory).utf8.dropFirst(FilePaths.isSame(source, "/") ? 0 : source.utf8.count)
            let inside = join(entry.destination, Substring(rest))
            // The mount seen at `inside` is the deepest one covering it, the last of equal depth.
            let winner = entries.indices.filter { covers(entries[$0].destination, inside) }
                .max { depth(entries[$0].destination) != depth(entries[$1].destination)
                    ? depth(entries[$0].destination) < depth(entries[$1].destination) : $0 < $1 }
            guard winner == index else { continue }
            if providedMounts.contains(where: { covers($0, inside) && depth($0) > depth(entry.destination) }) { continue }
            if masked.contains(where: { covers(normalized($0), inside) }) { continue }
            candidates.append(inside)
        }
        return candidates.first { FilePaths.isSame($0, hostDirectory) } ?? candidates.first
    }

    /// A hint for a program started at `/` because `hostDirectory` is not visible inside, when
    /// one of `arguments` names a file relative to it (`python3 script.py`); else `nil`.
    static func hint(hostDirectory: String, arguments: ArraySlice<String>) -> String? {
        // From / the program starts where the caller is: relative paths mean the same inside.
        guard !FilePaths.isSame(hostDirectory, "/") else { return nil }
        let relative = arguments.first { word in
            !word.isEmpty && !FilePaths.isAbsolute(word) && !word.hasPrefix("-")
                && access(FilePaths.join(hostDirectory, word), F_OK) == 0
        }
        guard let relative else { return nil }
        return "the current directory \(hostDirectory) is not visible inside the sandbox, so the program starts in / " +
            "and '\(relative)' is looked up there. To start in it, bind it: --ro-bind \"$PWD\" (or --bind to write " +
            "there); or choose a directory inside with --chdir."
    }

    /// Whether the sandbox's user may enter `directory` (a real path) inside, where a bind of
    /// `top` (the directory or one above it) shows it: the caller itself, or for root, nobody
    /// (65534), which must find `top` and every directory from it down searchable by others.
    /// What lies above `top` does not count: the supervisor reaches a bind source with the
    /// caller's rights.
    static func sandboxUserCanEnter(_ directory: String, below top: String = "/", asRoot: Bool = geteuid() == 0) -> Bool {
        guard asRoot else { return access(directory, X_OK) == 0 }
        var path = ""
        for component in [""] + FilePaths.components(directory).map(String.init) {
            path = component.isEmpty ? "/" : FilePaths.join(path, component)
            guard covers(top, path) else { continue }
            var info = stat()
            guard stat(path, &info) == 0, info.st_uid == 65534 || info.st_mode & S_IXOTH != 0 else { return false }
        }
        return true
    }

    /// The deepest bind source among `mounts` that covers `hostDirectory` (real paths), or `/`.
    static func deepestBindSource(covering hostDirectory: String, mounts: [MountEntry],
                                  realPath: (String) -> String? = SystemFiles.realPath) -> String {
        mounts.compactMap { entry -> String? in
            guard case .bind(let source, _, _, _) = entry, let real = realPath(source).map(normalized),
                  covers(real, hostDirectory) else { return nil }
            return real
        }.max { depth($0) < depth($1) } ?? "/"
    }

    /// Whether the path `outer` is `path` or one of its ancestors. Paths here are compared and
    /// split as bytes, as the kernel reads them: as characters, two spellings of one name (a
    /// precomposed "é", "e" with a combining accent) would be one directory, and a slash
    /// followed by a combining mark no slash.
    static func covers(_ outer: String, _ path: String) -> Bool {
        FilePaths.isSame(outer, "/") || FilePaths.isSame(path, outer) || FilePaths.isBelow(path, outer)
    }

    private static func depth(_ path: String) -> Int {
        FilePaths.componentCount(path)
    }

    private static func normalized(_ path: String) -> String {
        // Joined by hand: the generic `joined(separator:)` of substrings looks its witnesses up
        // at run time, which costs a fresh process a search of the binary's conformance records.
        var result = ""
        for part in FilePaths.components(path) {
            result.append("/")
            result.append(contentsOf: part)
        }
        return result.isEmpty ? "/" : result
    }

    private static func join(_ directory: String, _ rest: Substring) -> String {
        rest.isEmpty ? directory : normalized(directory + "/" + rest)
    }
}
