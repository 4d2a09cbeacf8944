import CSandboxShim
import CSupervisorSupport
import Glibc
import SandboxSystem

/// The binds whose host path the sandbox's own host ids cannot reach, opened by the supervisor.
///
/// A root caller's sandbox is nobody on the host (``HostIdentity``), and the init looks bind
/// sources up with those ids: a bundle, a container or a program below a 0700 directory
/// (Debian's `/root`) would fail there with EACCES. For each such bind the supervisor, which has
/// the caller's rights, clones the source's mount tree into a detached mount
/// (`xsb_detached_tree`), and the init attaches that instead of looking the path up. Only what
/// the sandbox's ids cannot reach goes this way, so an ordinary launch pays nothing for it.
/// Inside the bind each file's own mode still decides, against the sandbox's ids, what it may
/// read or write: this opens the way to a source, never the source itself.
///
/// An unprivileged caller's sandbox has the caller's own ids, so it reaches whatever the caller
/// names; there is nothing to open for it (and no privilege to clone a mount with).
struct DetachedBindSources {
    /// The plan's operation index → the index of its detached mount in ``trees``.
    let treeIndex: [Int: Int32]
    /// Open until the launch has handed them to the spawner thread.
    let trees: [FileDescriptor]

    init(plan: MountPlan, identity: HostIdentity) throws(SandboxError) {
        var treeIndex: [Int: Int32] = [:]
        var trees: [FileDescriptor] = []
        if identity.remapsRoot {
            for (index, operation) in plan.operations.enumerated() {
                guard case .bind(let source, _, _, _, _) = operation,
                      let blocking = Self.firstUnsearchableDirectory(above: source, uid: identity.uid, gid: identity.gid)
                else { continue }
                guard trees.count < Int(XSB_MAX_MOUNT_TREES) else {
                    throw SandboxError(
                        step: .configuration, errorNumber: E2BIG,
                        detail: "more than \(XSB_MAX_MOUNT_TREES) bind sources below directories that uid \(identity.uid) cannot search (such as \(blocking)); bind a common parent instead")
                }
                let result = xsb_detached_tree(source)
                guard let tree = FileDescriptor(adopting: result) else {
                    throw SandboxError(
                        step: .bindMount, errorNumber: -result,
                        detail: "bind source \(source): the sandbox's host uid \(identity.uid) cannot search \(blocking), and the supervisor could not clone the mount for it (open_tree)")
                }
                treeIndex[index] = Int32(trees.count)
                trees.append(tree)
            }
        }
        self.treeIndex = treeIndex
        self.trees = trees
    }

    /// The first directory on the way to `path` (a real path) that `uid`/`gid` may not search,
    /// by its mode bits as the kernel reads them (owner, else group, else others); nil when
    /// every one may be searched. The source itself needs no permission to be bound.
    static func firstUnsearchableDirectory(above path: String, uid: UInt32, gid: UInt32) -> String? {
        var directory = ""
        for component in [""] + FilePaths.components(path).dropLast().map(String.init) {
            directory = component.isEmpty && directory.isEmpty ? "/" : (directory == "/" ? "/" : directory + "/") + component
            var info = stat()
            guard stat(directory, &info) == 0 else { return directory }
            let bit: mode_t = info.st_uid == uid ? S_IXUSR : info.st_gid == gid ? S_IXGRP : S_IXOTH
            if info.st_mode & bit == 0 { return directory }
        }
        return nil
    }
}
