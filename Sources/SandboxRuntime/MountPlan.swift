import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem

/// The sandbox's file system as a list of operations for the C shim, checked on the host
/// first so that a bad entry fails with a clear message before anything is cloned.
///
/// The shim always provides /proc, a minimal /dev and a writable /tmp and /dev/shm, which share
/// `tmpSize`; this plan adds the policy's binds and tmpfs mounts, the caller's extra mounts, and
/// a few small files (/etc/passwd, /etc/group, /etc/hostname, /etc/hosts) unless a bind provides them.
struct MountPlan: Equatable {
    enum Operation: Equatable {
        /// `executable` false: nothing under it can be exec'd or mapped executable (noexec).
        case bind(source: String, target: String, writable: Bool, directory: Bool, executable: Bool = true)
        case tmpfs(target: String, sizeBytes: UInt64)
        case symlink(target: String, linkText: String)
        case file(target: String, contents: String)
        /// Hide what a bind exposes at `target`. The shim binds that bind back entry by entry,
        /// so that no mount on the way to the mask sits on a host file (mounts.c).
        case mask(target: String, directory: Bool)
        /// A masked path that does not exist on the host at the launch: nothing is placed there,
        /// but the bind it lies under is bound back entry by entry as for ``mask(target:directory:)``,
        /// so that nothing the host makes at that path later (or in a missing directory on the
        /// way to it) appears in the sandbox.
        case absentMask(target: String)

        /// Paths and contents compared as bytes, as the kernel compares them: two spellings of
        /// one character (a precomposed "é", and "e" with a combining accent) are two paths, so
        /// a pre-built sandbox for one never serves a launch that asked for the other.
        static func == (a: Operation, b: Operation) -> Bool {
            let same = FilePaths.isSame
            switch (a, b) {
            case let (.bind(source1, target1, writable1, directory1, executable1), .bind(source2, target2, writable2, directory2, executable2)):
                return same(source1, source2) && same(target1, target2) && writable1 == writable2 && directory1 == directory2
                    && executable1 == executable2
            case let (.tmpfs(target1, size1), .tmpfs(target2, size2)):
                return same(target1, target2) && size1 == size2
            case let (.symlink(target1, text1), .symlink(target2, text2)):
                return same(target1, target2) && same(text1, text2)
            case let (.file(target1, contents1), .file(target2, contents2)):
                return same(target1, target2) && same(contents1, contents2)
            case let (.mask(target1, directory1), .mask(target2, directory2)):
                return same(target1, target2) && directory1 == directory2
            case let (.absentMask(target1), .absentMask(target2)):
                return same(target1, target2)
            default:
                return false
            }
        }
    }

    static let defaultTmpSize: UInt64 = 64 << 20

    private(set) var operations: [Operation] = []
    private(set) var tmpSize: UInt64 = defaultTmpSize
    /// Where on the host each bind nested in another bind is placed, unless the shim binds that
    /// other bind back entry by entry (it has a mask below it: then every mount point below it
    /// is a file of the sandbox's own root). A nested bind sits on that host file, and when the
    /// file is unlinked or renamed over (as editors and configuration writers do), the kernel
    /// detaches the mount in every namespace. Whoever keeps a sandbox built checks these are
    /// still the same files before using it.
    private(set) var nestedMountPoints: [String] = []

    init(policy: Policy, extraMounts: [MountEntry], dataMounts: [MountEntry] = [], hostname: String, uid: UInt32, gid: UInt32) throws(SandboxError) {
        for entry in policy.filesystem.mounts + extraMounts {
            try add(entry)
        }
        for entry in dataMounts {
            try add(entry, executable: false)
        }
        for path in policy.filesystem.masked {
            try addMask(path)
        }
        // Parents before children, whatever order the policy and the caller gave: a bind at
        // /w/x must land inside the mount at /w, not under it. Stable, so equal depths keep
        // their order (a later bind of the same path wins).
        operations = operations.enumerated().map { (depth: Self.depth($0.element), offset: $0.offset, operation: $0.element) }
            .sorted { a, b in a.depth != b.depth ? a.depth < b.depth : a.offset < b.offset }
            .map(\.operation)
        // A host symlink recreated at its own path (/etc/localtime) that a bind of the same host
        // tree shows already (a policy adds /etc): the bind has it, and making it again fails.
        operations = operations.filter { operation in
            guard case .symlink(let target, _) = operation, let covering = coveringBind(of: target) else { return true }
            return !FilePaths.isSame(Self.hostPath(of: target, under: covering), target)
        }
        func isBound(_ path: String) -> Bool {
            operations.contains { operation in
                if case .bind(_, let target, _, _, _) = operation { return FilePaths.isSame(target, path) }
                return false
            }
        }
        let files = [
            ("/etc/passwd", "sandbox:x:\(uid):\(gid):extsandbox:/tmp:/bin/sh\n"),
            ("/etc/group", "sandbox:x:\(gid):\n"),
            ("/etc/hostname", "\(hostname)\n"),
            ("/etc/hosts", "127.0.0.1\tlocalhost \(hostname)\n::1\tlocalhost\n"),
        ]
        for (path, contents) in files where !isBound(path) && !isBound("/etc") {
            operations.append(.file(target: path, contents: contents))
        }
        nestedMountPoints = operations.compactMap { operation -> String? in
            guard case .bind(_, let target, _, _, _) = operation, let covering = coveringBind(of: target),
                  !hasMask(below: covering.target) else { return nil }
            return Self.hostPath(of: target, under: covering)
        }
    }

    /// Where on the host `target` is, shown by a bind of `bind.source` at `bind.target` above it.
    private static func hostPath(of target: String, under bind: (source: String, target: String)) -> String {
        bind.source + String(Substring(target.utf8.dropFirst(bind.target.utf8.count)))
    }

    /// The deepest bind that shows `target` below its own target (nil: none).
    private func coveringBind(of target: String) -> (source: String, target: String)? {
        var best: (source: String, target: String)?
        for case .bind(let source, let bindTarget, _, _, _) in operations where FilePaths.isBelow(target, bindTarget) {
            // The deepest; of two binds at one target the later, as the shim mounts them.
            if best == nil || bindTarget.utf8.count >= best!.target.utf8.count { best = (source, bindTarget) }
        }
        return best
    }

    /// Whether a mask lies below `target`: the shim then binds the bind at `target` back entry
    /// by entry, so that no mount on the way to the mask sits on a host file (mounts.c).
    private func hasMask(below target: String) -> Bool {
        operations.contains { operation in
            switch operation {
            case .mask(let maskTarget, _), .absentMask(let maskTarget): return FilePaths.isBelow(maskTarget, target)
            default: return false
            }
        }
    }

    private mutating func add(_ entry: MountEntry, executable: Bool = true) throws(SandboxError) {
        switch entry {
        case .tmpfs(let destination, let size):
            let target = try Self.checkedDestination(destination)
            // tmpfs reads size 0 as "no limit".
            guard size > 0 else {
                throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "tmpfs \(target) needs a size above 0")
            }
            if target == "/tmp" {
                tmpSize = size
            } else {
                operations.append(.tmpfs(target: target, sizeBytes: size))
            }
        case .bind(let source, let destination, let writable, let optional):
            let target = try Self.checkedDestination(destination)
            guard source.utf8.first == UInt8(ascii: "/") else {
                throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "bind source \(source) is not an absolute path")
            }
            guard !source.utf8.contains(0) else {
                throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "bind source \(source) contains a NUL byte")
            }
            var link = stat()
            guard lstat(source, &link) == 0 else {
                let err = errno
                if optional && err == ENOENT { return }
                throw SandboxError(step: .bindMount, errorNumber: err, detail: "bind source \(source)")
            }
            // A top-level symlink such as /bin -> usr/bin on merged-/usr systems is reproduced,
            // so that paths through it resolve inside the sandbox as they do outside.
            if (link.st_mode & S_IFMT) == S_IFLNK && !writable && executable && FilePaths.isSame(source, target) {
                if let text = SystemFiles.linkTarget(source) {
                    operations.append(.symlink(target: target, linkText: text))
                    return
                }
            }
            // The shim follows no symlink (a sandbox could have planted one): hand it a path
            // without any, through root-owned symlinks only.
            let real: String, info: stat
            do {
                (real, info) = try BindSource.resolved(source)
            } catch where optional && error.errorNumber == ENOENT {
                return
            }
            let kind = info.st_mode & S_IFMT
            // Device nodes only come from the shim's fixed /dev list: a policy must not hand a
            // disk or /dev/mem to a sandbox by accident.
            guard kind != S_IFBLK && kind != S_IFCHR else {
                throw SandboxError(step: .configuration, errorNumber: EPERM, detail: "refusing to bind device node \(source)")
            }
            // A read-only bind does not stop connect() to a unix socket (the kernel checks only
            // the socket's write permission), so binding a daemon's socket hands the sandbox
            // its service: refused. Sockets inside a bound directory are not (see --help).
            guard kind != S_IFSOCK else {
                throw SandboxError(step: .configuration, errorNumber: EPERM, detail: "refusing to bind unix socket \(source): a read-only bind would still let the sandbox connect to it")
            }
            operations.append(.bind(source: real, target: target, writable: writable, directory: kind == S_IFDIR, executable: executable))
        }
    }

    private static func depth(_ operation: Operation) -> Int {
        let target: String
        switch operation {
        case .bind(_, let t, _, _, _), .tmpfs(let t, _), .symlink(let t, _), .file(let t, _), .mask(let t, _), .absentMask(let t): target = t
        }
        return FilePaths.componentCount(target)
    }

    /// A masked path is hidden where a bind would show it; a path no bind shows is not visible
    /// anyway. One that does not exist on the host yet is kept out all the same: the host may
    /// make it while the sandbox runs.
    private mutating func addMask(_ path: String) throws(SandboxError) {
        let target = try Self.checkedDestination(path)
        var best: (source: String, target: String)?
        for case .bind(let source, let bindTarget, _, _, _) in operations
        where FilePaths.isSame(target, bindTarget) || FilePaths.isBelow(target, bindTarget) {
            // The deepest; of two binds at one target the later, as the shim mounts them.
            if best == nil || bindTarget.utf8.count >= best!.target.utf8.count { best = (source, bindTarget) }
        }
        guard let best, !FilePaths.isSame(target, best.target) else {
            if let best, FilePaths.isSame(target, best.target) {
                throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "\(path) is both bound and masked; remove one of them")
            }
            return
        }
        let hostPath = Self.hostPath(of: target, under: best)
        var info = stat()
        guard lstat(hostPath, &info) == 0 else {
            // Nothing to place where nothing is, but the way to it is still split, so that
            // nothing the host makes there later shows; any other failure must not skip the mask.
            if errno == ENOENT {
                operations.append(.absentMask(target: target))
                return
            }
            throw SandboxError(step: .configuration, errorNumber: errno, detail: "masked path \(path) (host \(hostPath))")
        }
        operations.append(.mask(target: target, directory: (info.st_mode & S_IFMT) == S_IFDIR))
    }

    /// Destinations are absolute, normalized, and never replace what the shim itself provides.
    /// Compared byte by byte, as the kernel compares paths.
    static func checkedDestination(_ path: String) throws(SandboxError) -> String {
        // A NUL would end the path where C reads it, short of what was checked here.
        guard !path.utf8.contains(0) else {
            throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "mount destination \(path) contains a NUL byte")
        }
        let normalized: String
        if FilePaths.isNormalizedAbsolute(path) {
            normalized = path
        } else {
            let parts = path.utf8.split(separator: UInt8(ascii: "/"))
            guard path.utf8.first == UInt8(ascii: "/"),
                  !parts.contains(where: { $0.elementsEqual("..".utf8) || $0.elementsEqual(".".utf8) }) else {
                throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "mount destination \(path) must be an absolute path without . or ..")
            }
            normalized = "/" + parts.map { String(Substring($0)) }.joined(separator: "/")
        }
        if normalized == "/" || normalized == "/proc" || FilePaths.isBelow(normalized, "/proc") || normalized == "/dev" || FilePaths.isBelow(normalized, "/dev") {
            throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "mount destination \(normalized) is reserved (the sandbox provides /, /proc and /dev itself)")
        }
        return normalized
    }

    /// Whether a host path is reachable at the same path inside: some bind covers it.
    func exposes(hostPath path: String) -> Bool {
        for op in operations {
            if case .bind(let source, let target, _, _, _) = op, FilePaths.isSame(source, target),
               FilePaths.isSame(path, source) || FilePaths.isBelow(path, source) {
                return true
            }
        }
        return false
    }

    mutating func append(_ operation: Operation) {
        operations.append(operation)
    }

    /// Lays the plan out as C structs in `arena`; the binds in `detached` take their source from
    /// the detached mount of that index.
    func cOperations(in arena: CArena, detached: DetachedBindSources? = nil) -> (UnsafeMutablePointer<xsb_mount_op>, Int) {
        let ops = arena.array(of: xsb_mount_op.self, count: operations.count)
        for (index, operation) in operations.enumerated() {
            var op = xsb_mount_op()
            switch operation {
            case .bind(let source, let target, let writable, let directory, let executable):
                op.kind = Int32(XSB_MOUNT_BIND.rawValue)
                op.source = UnsafePointer(arena.string(source))
                op.target = UnsafePointer(arena.string(target))
                op.flags = (writable ? Int32(XSB_MOUNT_F_WRITABLE) : 0) | (directory ? Int32(XSB_MOUNT_F_DIRECTORY) : 0)
                    | (executable ? 0 : Int32(XSB_MOUNT_F_NOEXEC))
                if let tree = detached?.treeIndex[index] {
                    op.flags |= Int32(XSB_MOUNT_F_TREE)
                    op.tree = tree
                }
            case .tmpfs(let target, let size):
                op.kind = Int32(XSB_MOUNT_TMPFS.rawValue)
                op.target = UnsafePointer(arena.string(target))
                op.size = size
                op.mode = 0o1777
            case .symlink(let target, let text):
                op.kind = Int32(XSB_MOUNT_SYMLINK.rawValue)
                op.source = UnsafePointer(arena.string(text))
                op.target = UnsafePointer(arena.string(target))
            case .mask(let target, let directory):
                op.kind = Int32(XSB_MOUNT_MASK.rawValue)
                op.target = UnsafePointer(arena.string(target))
                op.flags = directory ? Int32(XSB_MOUNT_F_DIRECTORY) : 0
            case .absentMask(let target):
                op.kind = Int32(XSB_MOUNT_MASK.rawValue)
                op.target = UnsafePointer(arena.string(target))
                op.flags = Int32(XSB_MOUNT_F_ABSENT)
            case .file(let target, let contents):
                op.kind = Int32(XSB_MOUNT_FILE.rawValue)
                let bytes = Array(contents.utf8)
                op.source = UnsafePointer(arena.bytes(bytes))
                op.size = UInt64(bytes.count)
                op.target = UnsafePointer(arena.string(target))
                op.mode = 0o644
            }
            ops[index] = op
        }
        return (ops, operations.count)
    }
}
