import CSandboxShim
import Glibc

/// The host uid and gid a sandbox's one inside uid and gid stand for.
///
/// An unprivileged caller's sandbox is the caller (its own ids map to the inside ids: the only
/// mapping an unprivileged user namespace allows). A root caller's sandbox is never host root:
/// a caller whose uid or gid is 0 maps to `nobody`/`nogroup` (65534) instead, so that what the
/// sandbox creates in a writable bind is owned by 65534 (no setuid-root file can appear on the
/// host), host files are checked against 65534 (the files inside binds must be readable by it, a
/// writable bind's directory writable by it; a source it cannot reach is bound from a mount the
/// supervisor cloned, see ``DetachedBindSources``), and
/// root-only kernel files (`/proc/slabinfo`) are closed. The init switches to these ids before
/// it builds the file system, and a root supervisor's spawner thread drops its supplementary
/// groups, which a sandbox could not drop itself (setgroups is denied inside).
///
/// Why `nobody` and not a private range (/etc/subuid): it exists on every system and needs no
/// allocation shared between supervisors; the price is that host processes running as nobody
/// share the identity, so they may signal a root caller's sandboxed processes (and, where no
/// LSM restricts ptrace, trace them). Files in writable binds are left owned by 65534.
public struct HostIdentity: Sendable, Equatable {
    /// `nobody` and `nogroup` on Debian-family systems and most others.
    public static let unprivilegedID: UInt32 = 65534

    public let uid: UInt32
    public let gid: UInt32
    /// Whether the caller was root (uid or gid 0) and is mapped to ``unprivilegedID``.
    public let remapsRoot: Bool

    /// The ids a caller with these credentials runs as in its sandboxes.
    ///
    /// A uid or gid 0 needs the privilege to map another id (CAP_SETUID and CAP_SETGID, that is
    /// an effective uid 0): a caller with gid 0 but no privilege cannot be made nobody, so it is
    /// refused rather than left as group root.
    public static func forCaller(
        uid: uid_t = getuid(), gid: gid_t = getgid(), effectiveUID: uid_t = geteuid()
    ) throws(SandboxError) -> HostIdentity {
        guard uid == 0 || gid == 0 else { return HostIdentity(uid: uid, gid: gid, remapsRoot: false) }
        guard effectiveUID == 0 else {
            throw SandboxError(
                step: .configuration, errorNumber: EPERM,
                detail: "the caller's uid or gid is 0 (root) but it has no privilege to map the sandbox to nobody (\(unprivilegedID)); run as root or with another group")
        }
        return HostIdentity(uid: unprivilegedID, gid: unprivilegedID, remapsRoot: true)
    }
}
