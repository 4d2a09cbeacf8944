import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem

/// Resolves a bind source to a path without symlinks, following only symlinks owned by root.
///
/// A sandbox with a writable bind can leave a symlink there (`DIR/x -> /some/private/dir`); a
/// later launch with `--ro-bind DIR/x:/x` must not expose what it points to. Whatever a sandbox
/// creates on the host is owned by its host id: the caller, or nobody for a root caller
/// (``HostIdentity``), never root. So root-owned symlinks (`/lib -> usr/lib`, `/etc/alternatives`)
/// are followed and every other one is refused, the caller's own included: an unprivileged
/// caller's sandbox plants symlinks owned by the caller. The walk goes component by component
/// with `lstat`, so a symlink anywhere on the way counts, not just the last one.
///
/// The shim then opens the result below the old root with `RESOLVE_NO_SYMLINKS` and binds
/// from that fd: a component swapped for a symlink between this check and the mount fails
/// the launch (ELOOP) instead of being followed.
enum BindSource {
    /// The kernel's own limit on symlinks in one lookup.
    static let maximumLinks = 40

    /// The symlink-free path of `path` (absolute), with what `lstat` said of its last component
    /// (never a symlink), or an error naming the untrusted symlink. `errorNumber` is ENOENT when
    /// something on the way does not exist.
    static func resolved(_ path: String) throws(SandboxError) -> (path: String, info: stat) {
        // C would read the path only up to a NUL, short of what is checked here.
        guard !path.utf8.contains(0) else {
            throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "bind source \(path) contains a NUL byte")
        }
        // The walk so far, "" for the root, and what it was before each component.
        var resolved = ""
        var earlier: [String] = []
        var pending: [Substring] = FilePaths.components(path).reversed()
        var links = 0
        // What lstat said of `resolved`, unless the last step went up or through a symlink.
        var info = stat()
        var infoIsCurrent = false
        while let component = pending.popLast() {
            if component.utf8.elementsEqual(".".utf8) { continue }
            if component.utf8.elementsEqual("..".utf8) {
                // Every resolved component is a real directory; the root's parent is the root.
                if let parent = earlier.popLast() {
                    resolved = parent
                    infoIsCurrent = false
                }
                continue
            }
            let candidate = resolved + "/" + component
            guard lstat(candidate, &info) == 0 else {
                throw failure(errno, "bind source \(path)" + (candidate == path ? "" : " (at \(candidate))"))
            }
            guard (info.st_mode & S_IFMT) == S_IFLNK else {
                earlier.append(resolved)
                resolved = candidate
                infoIsCurrent = true
                continue
            }
            infoIsCurrent = false
            guard info.st_uid == 0 else {
                throw SandboxError(
                    step: .configuration, errorNumber: EPERM,
                    detail: "bind source \(path) " + (candidate == path ? "is a symlink" : "goes through symlink \(candidate)")
                        + " owned by uid \(info.st_uid): only root-owned symlinks are followed (a sandbox may have left this one); give the path it points to")
            }
            links += 1
            guard links <= maximumLinks, let text = SystemFiles.linkTarget(candidate) else {
                throw failure(links > maximumLinks ? ELOOP : errno, "bind source \(path) (at \(candidate))")
            }
            if text.utf8.first == UInt8(ascii: "/") {
                resolved = ""
                earlier.removeAll()
            }
            pending.append(contentsOf: FilePaths.components(text).reversed())
        }
        let final = resolved.isEmpty ? "/" : resolved
        if !infoIsCurrent, lstat(final, &info) != 0 { throw failure(errno, "bind source \(path) (at \(final))") }
        return (final, info)
    }

    private static func failure(_ errorNumber: Int32, _ detail: String) -> SandboxError {
        SandboxError(step: .bindMount, errorNumber: errorNumber, detail: detail)
    }
}
