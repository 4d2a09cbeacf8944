import Glibc
import SandboxSystem

/// Puts bundles into a location and takes them out (`extsandbox install|uninstall`), so that a
/// monitor never sees half a bundle: a copy is built under a hidden name that does not end in
/// `.appex` (monitors ignore it) and renamed into place; a removal renames the bundle out of the
/// location first, then deletes it.
public enum BundleInstaller {
    /// Copies the bundle at `source` into `directory` (created 0755 where missing) as `name`
    /// (which ends in `.appex`), replacing a bundle of that name. Files keep their permission bits
    /// (not their owner: the copy is the caller's); symbolic links are copied as links; anything
    /// else (a FIFO, a device) is refused. `staged` is called with the complete copy before it is
    /// renamed into place: what it checks (and approves) is exactly what is installed, which no
    /// one else can change meanwhile, whereas the installed path may already hold another
    /// installer's copy by the time this returns. Returns the installed path.
    public static func install(_ source: String, into directory: String, as name: String,
                               staged: (String) throws(CatalogProblem) -> Void = { _ in }) throws(CatalogProblem) -> String {
        try makeDirectories(directory)
        let final = FilePaths.join(directory, name)
        let partial = FilePaths.join(directory, ".\(name).partial-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        do throws(CatalogProblem) {
            var info = stat()
            guard lstat(source, &info) == 0 else { throw CatalogProblem(.broken, file: source, "cannot stat: \(errnoText())") }
            try copyTree(from: source, to: partial, info: info, depth: 0)
            try staged(partial)
            try place(partial, at: final, in: directory)
        } catch {
            removeTree(partial)
            throw error
        }
        _ = syncDirectory(directory)
        return final
    }

    /// Removes the bundle at `path`: renamed out of its location first (one event: the monitor
    /// sees it gone at once), then deleted.
    public static func uninstall(_ path: String) throws(CatalogProblem) {
        let directory = FilePaths.directory(of: path)
        let aside = FilePaths.join(directory, ".\(FilePaths.lastComponent(path)).removing-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        guard rename(path, aside) == 0 else { throw CatalogProblem(.broken, file: path, "cannot remove: \(errnoText())") }
        removeTree(aside)
        _ = syncDirectory(directory)
    }

    /// Renames `partial` to `final`. A bundle already there is first renamed aside (and removed
    /// after): a directory cannot be renamed over a non-empty one. Concurrent installs of one name
    /// retry until one of them is in place last.
    private static func place(_ partial: String, at final: String, in directory: String) throws(CatalogProblem) {
        for _ in 0..<100 {
            if rename(partial, final) == 0 { return }
            guard errno == ENOTEMPTY || errno == EEXIST else { throw CatalogProblem(.broken, file: final, "cannot rename \(partial) into place: \(errnoText())") }
            let old = FilePaths.join(directory, ".\(FilePaths.lastComponent(final)).old-\(getpid())-\(UInt32.random(in: 0 ... .max))")
            if rename(final, old) == 0 {
                defer { removeTree(old) }
                if rename(partial, final) == 0 { return }
            } else if errno != ENOENT {
                throw CatalogProblem(.broken, file: final, "cannot move the installed bundle aside: \(errnoText())")
            }
        }
        throw CatalogProblem(.broken, file: final, "cannot rename \(partial) into place: others keep installing the same bundle")
    }

    private static func copyTree(from source: String, to destination: String, info: stat, depth: Int) throws(CatalogProblem) {
        guard depth < BundleContents.maximumDepth else { throw CatalogProblem(.broken, file: source, "directories nested too deep") }
        let mode = mode_t(info.st_mode & 0o7777) & ~mode_t(S_ISUID | S_ISGID)
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            guard mkdir(destination, 0o700) == 0 else { throw CatalogProblem(.broken, file: destination, "cannot create: \(errnoText())") }
            guard let names = SystemFiles.entryBytes(source) else { throw CatalogProblem(.broken, file: source, "cannot list: \(errnoText())") }
            for bytes in names {
                guard let name = String(validating: bytes, as: UTF8.self) else {
                    throw CatalogProblem(.broken, file: FilePaths.join(source, ExtensionCatalog.showingInvalidBytes(bytes)), "the name is not UTF-8")
                }
                var child = stat()
                let from = FilePaths.join(source, name)
                guard lstat(from, &child) == 0 else { throw CatalogProblem(.broken, file: from, "cannot stat: \(errnoText())") }
                try copyTree(from: from, to: FilePaths.join(destination, name), info: child, depth: depth + 1)
            }
            // The final mode last: a read-only directory could not be filled.
            guard chmod(destination, mode) == 0 else { throw CatalogProblem(.broken, file: destination, "chmod: \(errnoText())") }
        case S_IFREG:
            try copyFile(from: source, to: destination, mode: mode)
        case S_IFLNK:
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlink(source, &buffer, buffer.count - 1)
            guard count >= 0 else { throw CatalogProblem(.broken, file: source, "cannot read the symbolic link: \(errnoText())") }
            buffer[count] = 0
            guard symlink(buffer, destination) == 0 else { throw CatalogProblem(.broken, file: destination, "cannot create the symbolic link: \(errnoText())") }
        default:
            throw CatalogProblem(.broken, file: source, "neither a file, a directory nor a symbolic link: a bundle cannot hold it")
        }
    }

    private static func copyFile(from source: String, to destination: String, mode: mode_t) throws(CatalogProblem) {
        let input = open(source, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard input >= 0 else { throw CatalogProblem(.broken, file: source, "cannot open: \(errnoText())") }
        defer { close(input) }
        let output = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw CatalogProblem(.broken, file: destination, "cannot create: \(errnoText())") }
        defer { close(output) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { bytes in retryingInterrupts { read(input, bytes.baseAddress, bytes.count) } }
            guard count >= 0 else { throw CatalogProblem(.broken, file: source, "cannot read: \(errnoText())") }
            if count == 0 { break }
            guard writeAll(output, buffer[..<count]) else { throw CatalogProblem(.broken, file: destination, "cannot write: \(errnoText())") }
        }
        guard fchmod(output, mode) == 0, fsync(output) == 0 else { throw CatalogProblem(.broken, file: destination, "cannot finish: \(errnoText())") }
    }

    /// `mkdir -p`, new directories 0755 (others' hosts must read what is installed there).
    static func makeDirectories(_ directory: String) throws(CatalogProblem) {
        var info = stat()
        if stat(directory, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFDIR else { throw CatalogProblem(.broken, file: directory, "not a directory") }
            return
        }
        let parent = FilePaths.directory(of: directory)
        if !parent.isEmpty && parent != directory { try makeDirectories(parent) }
        guard mkdir(directory, 0o755) == 0 || errno == EEXIST else { throw CatalogProblem(.broken, file: directory, "cannot create: \(errnoText())") }
    }

    /// Deletes `path` and everything below it, following no symbolic link; best effort.
    static func removeTree(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR {
            chmod(path, 0o700)  // a read-only directory cannot be emptied
            for name in SystemFiles.entryBytes(path) ?? [] {
                removeTree(FilePaths.join(path, String(decoding: name, as: UTF8.self)))
            }
            rmdir(path)
        } else {
            unlink(path)
        }
    }

    private static func syncDirectory(_ directory: String) -> Bool {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return fsync(fd) == 0
    }
}
