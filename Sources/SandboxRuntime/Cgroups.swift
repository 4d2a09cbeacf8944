import Glibc
import SandboxSystem
import Synchronization
import SandboxPolicy

/// Memory and process-count limits for a whole sandbox through cgroups, nested only under the
/// supervisor's own cgroup (delegation rules: we never move a process anywhere else).
///
/// This file owns a sandbox cgroup's whole life on the host: where cgroups may be made
/// (``detect()``), a sandbox's name, creation with its policy's limits and the checks that fail
/// a launch closed (``SandboxCgroup/make(for:hostUID:under:)``), the fds a launch hands on
/// (``SandboxCgroup/launchDescriptors(of:)``), removal when the sandbox ends or its launch fails,
/// and the sweep of what dead supervisors left. The C side only joins: `cgroups.c` starts the
/// init in its cgroup (v2, `CLONE_INTO_CGROUP`) or moves the init there (v1 `tasks`); the
/// spawner's fd table and the launch description carry the fds and nothing else.
///
/// v2 where the supervisor's cgroup delegates `memory` and `pids` to children; otherwise the
/// v1 `memory` and `pids` hierarchies where they are writable. Where neither is available the
/// sandbox still has its rlimits (address space per process, processes per sandbox).
struct CgroupSupport: Sendable {
    enum Layout: Sendable, Equatable {
        case v2(parent: String)
        case v1(memoryParent: String?, pidsParent: String?)
    }

    let layout: Layout

    /// Finds the parents we may create cgroups under.
    static func detect() -> CgroupSupport? {
        guard let mountinfo = SystemFiles.text("/proc/self/mountinfo"), let membership = SystemFiles.text("/proc/self/cgroup")
        else { return nil }
        let found = candidates(mountinfo: mountinfo, membership: membership)
        // The delegated controllers, as whole words (`String.contains` would also take the
        // generic substring search, whose first use costs a scan of the conformance records).
        if let dir = found.v2, let delegated = SystemFiles.text(dir + "/cgroup.subtree_control")?.split(whereSeparator: \.isWhitespace),
           delegated.contains("memory"), delegated.contains("pids"), mayCreate(under: dir) {
            return CgroupSupport(layout: .v2(parent: dir))
        }
        let memory = found.memory.flatMap { mayCreate(under: $0) ? $0 : nil }
        let pids = found.pids.flatMap { mayCreate(under: $0) ? $0 : nil }
        if memory == nil && pids == nil { return nil }
        return CgroupSupport(layout: .v1(memoryParent: memory, pidsParent: pids))
    }

    /// This process's own cgroup directories, from `/proc/self/mountinfo` and
    /// `/proc/self/cgroup`: in the v2 hierarchy, and in the v1 `memory` and `pids` ones (nil
    /// where there is none, or where the mount does not show it).
    static func candidates(mountinfo: String, membership: String) -> (v2: String?, memory: String?, pids: String?) {
        // Read as bytes: only a few lines and fields matter, and splitting whole texts into
        // characters was most of a one-shot `extsandbox exec`'s start of its supervisor.
        typealias Bytes = Substring.UTF8View
        func text(_ bytes: Bytes) -> String { String(Substring(bytes)) }
        func names(_ list: Bytes, include name: String) -> Bool {
            list.split(separator: UInt8(ascii: ",")).contains { $0.elementsEqual(name.utf8) }
        }
        var ownV2: String?, ownMemory: String?, ownPids: String?
        for line in membership.utf8.split(separator: UInt8(ascii: "\n")) {
            let fields = line.split(separator: UInt8(ascii: ":"), maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            if fields[1].isEmpty { ownV2 = text(fields[2]) }
            if names(fields[1], include: "memory") { ownMemory = text(fields[2]) }
            if names(fields[1], include: "pids") { ownPids = text(fields[2]) }
        }
        var v2Mount: (point: String, root: String)?
        var memoryMount: (point: String, root: String)?, pidsMount: (point: String, root: String)?
        for line in mountinfo.utf8.split(separator: UInt8(ascii: "\n")) {
            // Fields before the lone "-" are the mount's; after it: fs type, source, super options.
            let fields = line.split(separator: UInt8(ascii: " "))
            guard let dash = fields.firstIndex(where: { $0.elementsEqual("-".utf8) }) else { continue }
            let left = fields[..<dash], right = fields[(dash + 1)...]
            guard left.count >= 5, right.count >= 3 else { continue }
            let type = right[right.startIndex], options = right[right.startIndex + 2]
            let isV2 = type.elementsEqual("cgroup2".utf8), isV1 = type.elementsEqual("cgroup".utf8)
            guard isV2 || isV1 else { continue }
            let mount = (point: unescaped(left[left.startIndex + 4]), root: unescaped(left[left.startIndex + 3]))
            if isV2 { v2Mount = mount }
            if isV1 && names(options, include: "memory") { memoryMount = mount }
            if isV1 && names(options, include: "pids") { pidsMount = mount }
        }
        // mountinfo writes a space, tab, newline or backslash in a path as an octal escape ("\\040").
        func unescaped(_ field: Bytes) -> String {
            let bytes = Array(field)
            guard bytes.contains(UInt8(ascii: "\\")) else { return text(field) }
            var out: [UInt8] = [], index = 0
            while index < bytes.count {
                let digits = index + 3 < bytes.count ? bytes[(index + 1)...(index + 3)] : []
                if bytes[index] == UInt8(ascii: "\\"), digits.count == 3, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "7")).contains($0) }),
                   let value = UInt8(String(decoding: digits, as: UTF8.self), radix: 8) {
                    out.append(value)
                    index += 4
                } else {
                    out.append(bytes[index])
                    index += 1
                }
            }
            return String(decoding: out, as: UTF8.self)
        }
        func directory(_ mount: (point: String, root: String)?, _ own: String?) -> String? {
            guard let mount, let own,
                  mount.root == "/" || FilePaths.isSame(own, mount.root) || FilePaths.isBelow(own, mount.root) else { return nil }
            let relative = mount.root == "/" ? own : String(Substring(own.utf8.dropFirst(mount.root.utf8.count)))
            return mount.point.hasSuffix("/") ? mount.point + String(Substring(relative.utf8.dropFirst())) : mount.point + relative
        }
        return (directory(v2Mount, ownV2), directory(memoryMount, ownMemory), directory(pidsMount, ownPids))
    }

    /// Removes cgroups that supervisors which died (SIGKILL leaves no chance to clean up) left in
    /// `parent`: `extsandbox-PID-N` whose PID no longer runs. Only empty ones go (rmdir).
    private static func sweep(_ parent: String) {
        guard let names = SystemFiles.entries(parent) else { return }
        for name in names where name.hasPrefix("extsandbox-") {
            let fields = name.split(separator: "-")
            guard fields.count == 3, let owner = pid_t(fields[1]) else { continue }
            if owner != getpid() && kill(owner, 0) != 0 && errno == ESRCH { rmdir("\(parent)/\(name)") }
        }
    }

    /// Whether we may create cgroups under `parent` (swept first). The kernel checks the same
    /// permission for access(2) as for mkdir(2) there (mode bits, capabilities, a read-only
    /// mount); a probe directory would prove it too but costs a one-shot `extsandbox exec` a
    /// memory cgroup creation and removal. Should mkdir still refuse later, that launch fails.
    private static func mayCreate(under parent: String) -> Bool {
        sweep(parent)
        return access(parent, W_OK) == 0
    }

    /// Creates the cgroups of one sandbox with its limits. Any failure after creation fails
    /// the launch (and removes what was made).
    func makeSandboxCgroup(name: String, memoryBytes: UInt64?, processes: UInt64?) throws(SandboxError) -> SandboxCgroup {
        var group = SandboxCgroup.Builder()
        do throws(SandboxError) {
            switch layout {
            case .v2(let parent):
                let dir = try group.create("\(parent)/\(name)")
                if let memoryBytes {
                    try group.write("\(dir)/memory.max", "\(memoryBytes)")
                    group.limitsMemory = true
                    // No such file means no swap accounting (no swap to limit); any other failure counts.
                    do { try group.write("\(dir)/memory.swap.max", "0") } catch where error.errorNumber == ENOENT {}
                }
                if let processes {
                    try group.write("\(dir)/pids.max", "\(processes)")
                    group.limitsProcesses = true
                }
                try group.openDirectory(dir)
                group.oomControl = "\(dir)/memory.events"
            case .v1(let memoryParent, let pidsParent):
                if let memoryParent, let memoryBytes {
                    let dir = try group.create("\(memoryParent)/\(name)")
                    try group.write("\(dir)/memory.limit_in_bytes", "\(memoryBytes)")
                    group.limitsMemory = true
                    group.oomControl = "\(dir)/memory.oom_control"
                    try group.openTasks(dir)
                }
                if let pidsParent, let processes {
                    let dir = try group.create("\(pidsParent)/\(name)")
                    try group.write("\(dir)/pids.max", "\(processes)")
                    group.limitsProcesses = true
                    try group.openTasks(dir)
                }
            }
        } catch {
            group.build().remove()
            throw error
        }
        return group.build()
    }
}

extension SandboxCgroup {
    /// Numbers the sandboxes' cgroups: process-wide, as their names are (several supervisors may
    /// run in one process, and ``CgroupSupport``'s sweep reads the pid in each name).
    private static let counter = Atomic<Int>(0)

    /// The cgroup of a sandbox with `limits` whose processes run as host uid `hostUID`, made
    /// under `support` (nil: none writable here) when the limits need one; nil when they do not,
    /// or when the sandbox may do without. Fails closed, with nothing left, when the limits
    /// cannot hold: a whole-sandbox memory limit without a memory cgroup, or a process limit for
    /// host uid 0 without a pids cgroup.
    static func make(for limits: ResourceLimits, hostUID: uid_t, under support: CgroupSupport?) throws(SandboxError) -> SandboxCgroup? {
        var cgroup: SandboxCgroup?
        if let support, limits.memoryBytes != nil || limits.processes != nil {
            let name = "extsandbox-\(getpid())-\(counter.add(1, ordering: .relaxed).newValue)"
            cgroup = try support.makeSandboxCgroup(name: name, memoryBytes: limits.memoryBytes, processes: limits.processes)
        }
        // RLIMIT_AS bounds each process, not their sum (memfds, shared memory, many processes):
        // a whole-sandbox memory limit needs a memory cgroup, or the policy's explicit opt-in.
        if let memory = limits.memoryBytes, limits.memoryScope == .sandbox, !(cgroup?.limitsMemory ?? false) {
            cgroup?.remove()
            throw SandboxError(step: .cgroup, errorNumber: ENOTSUP, detail: CgroupSupport.noMemoryCgroupMessage(limitBytes: memory))
        }
        // The kernel never applies RLIMIT_NPROC to host uid 0 (whatever the namespace), so a
        // sandbox that were host root could have its process limit only from a pids cgroup.
        // HostIdentity never maps to 0; should that change, fail closed.
        if limits.processes != nil && hostUID == 0 && !(cgroup?.limitsProcesses ?? false) {
            cgroup?.remove()
            throw SandboxError(step: .cgroup, errorNumber: ENOTSUP, detail: "the policy limits processes, but RLIMIT_NPROC does not apply to uid 0 and no pids cgroup is writable here")
        }
        return cgroup
    }

    /// What a launch hands the sandbox's init to join `cgroup`, in the C launch's terms (-1:
    /// none): the v2 directory it is cloned into and the v1 `tasks` files it writes itself to.
    /// They stay open until ``closeDescriptors()``, which the launch calls once the spawner
    /// thread has its copies.
    static func launchDescriptors(of cgroup: SandboxCgroup?) -> (directory: Int32, tasks: (Int32, Int32, Int32, Int32)) {
        let tasks = cgroup?.tasksFileDescriptors.map(\.rawValue) ?? []
        return (cgroup?.directoryDescriptor?.rawValue ?? -1,
                (tasks.count > 0 ? tasks[0] : -1, tasks.count > 1 ? tasks[1] : -1, tasks.count > 2 ? tasks[2] : -1, -1))
    }
}

/// The cgroup directories of one sandbox, removed when the sandbox has ended.
///
/// What the launch decided (directories, limits) is fixed once built; what changes later (the
/// launch's fds, closed once the init has joined; the directories, removed once) is guarded.
final class SandboxCgroup: Sendable {
    /// Collects the directories and fds while the cgroups are made (one thread).
    struct Builder {
        var directories: [String] = []
        var tasksFileDescriptors: [FileDescriptor] = []
        var directoryDescriptor: FileDescriptor?
        var oomControl: String?
        var limitsProcesses = false
        var limitsMemory = false

        mutating func create(_ path: String) throws(SandboxError) -> String {
            guard mkdir(path, 0o755) == 0 else { throw SandboxError(step: .cgroup, errorNumber: errno, detail: "mkdir \(path)") }
            directories.append(path)
            return path
        }

        func write(_ path: String, _ value: String) throws(SandboxError) {
            let fd = open(path, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw SandboxError(step: .cgroup, errorNumber: errno, detail: path) }
            defer { close(fd) }
            let bytes = Array(value.utf8)
            guard Glibc.write(fd, bytes, bytes.count) == bytes.count else {
                throw SandboxError(step: .cgroup, errorNumber: errno, detail: "\(path) = \(value)")
            }
        }

        mutating func openTasks(_ dir: String) throws(SandboxError) {
            guard let fd = FileDescriptor(adopting: open("\(dir)/tasks", O_WRONLY | O_CLOEXEC)) else {
                throw SandboxError(step: .cgroup, errorNumber: errno, detail: "\(dir)/tasks")
            }
            tasksFileDescriptors.append(fd)
        }

        mutating func openDirectory(_ dir: String) throws(SandboxError) {
            guard let fd = FileDescriptor(adopting: open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) else {
                throw SandboxError(step: .cgroup, errorNumber: errno, detail: dir)
            }
            directoryDescriptor = fd
        }

        func build() -> SandboxCgroup { SandboxCgroup(self) }
    }

    private struct LaunchDescriptors {
        var tasks: [FileDescriptor]
        var directory: FileDescriptor?
    }

    /// The directories, in the order they were made.
    let directories: [String]
    /// Whether a pids controller limits this sandbox's processes.
    let limitsProcesses: Bool
    /// Whether a memory controller limits this sandbox's memory as a whole.
    let limitsMemory: Bool
    /// The file whose `oom_kill` counter tells that the memory limit killed something.
    let oomControl: String?
    private let descriptors: Mutex<LaunchDescriptors>
    /// The directories not removed yet.
    private let remaining: Mutex<[String]>

    private init(_ builder: Builder) {
        directories = builder.directories
        limitsProcesses = builder.limitsProcesses
        limitsMemory = builder.limitsMemory
        oomControl = builder.oomControl
        descriptors = Mutex(LaunchDescriptors(tasks: builder.tasksFileDescriptors, directory: builder.directoryDescriptor))
        remaining = Mutex(builder.directories)
    }

    /// v1: the `tasks` files the sandbox's init writes "0" to, moving itself (see xsb_shim.h).
    /// Open until ``closeDescriptors()``, which the launch calls once the init has joined.
    var tasksFileDescriptors: [FileDescriptor] { descriptors.withLock { $0.tasks } }
    /// v2: the directory the init is cloned into (CLONE_INTO_CGROUP), if any; open until
    /// ``closeDescriptors()``.
    var directoryDescriptor: FileDescriptor? { descriptors.withLock { $0.directory } }

    /// Closes what the launch needed (once); the directories stay until ``remove()``.
    func closeDescriptors() {
        let (tasks, directory) = descriptors.withLock { fds in
            defer { fds = LaunchDescriptors(tasks: [], directory: nil) }
            return (fds.tasks, fds.directory)
        }
        for fd in tasks { fd.close() }
        directory?.close()
    }

    /// Whether the kernel's OOM killer acted inside this cgroup.
    var memoryLimitHit: Bool {
        guard let oomControl, let text = SystemFiles.text(oomControl) else { return false }
        for line in text.split(separator: "\n") where line.hasPrefix("oom_kill ") {
            return (Int(line.split(separator: " ").last ?? "0") ?? 0) > 0
        }
        return false
    }

    /// The memory the sandbox's processes hold now, charged to its memory cgroup (nil: none).
    var memoryInUse: Int? {
        for directory in directories {
            for file in ["memory.current", "memory.usage_in_bytes"] {
                if let text = SystemFiles.text(directory + "/" + file), let bytes = Int(text.filter(\.isNumber)) { return bytes }
            }
        }
        return nil
    }

    /// Tries once to remove every directory left (never blocks: for the monitor thread).
    /// Returns true when none is left. The processes are gone by then (the init's exit takes
    /// its whole PID namespace with it), but the kernel may need a moment to let go (EBUSY).
    func removeOnce() -> Bool {
        closeDescriptors()
        return remaining.withLock { left in
            left = left.reversed().filter { rmdir($0) != 0 && errno == EBUSY }.reversed()
            return left.isEmpty
        }
    }

    /// Removes the directories as the sandbox's end is reported on the monitor thread, then
    /// calls `done`: at once, on this thread, when one `rmdir` each does it (as it usually
    /// does); otherwise the retries of ``remove()`` run on a thread of their own, which calls
    /// `done` after them (nothing on the monitor thread may block).
    func removeWithoutBlocking(then done: @escaping @Sendable () -> Void) {
        guard !removeOnce() else { return done() }
        do {
            try SupervisorThread.start(name: "xsb-cgroup-rm", stackSize: 256 << 10) { [self] in
                remove()
                done()
            }
        } catch {
            Task.detached { [self] in
                remove()
                done()
            }
        }
    }

    /// Closes the files and removes the directories, retrying for up to a second while the
    /// kernel says EBUSY (a directory still busy then is left to the next supervisor's sweep).
    /// Blocks: never on the monitor thread.
    func remove() {
        for _ in 0..<1000 {
            if removeOnce() { return }
            usleep(1000)
        }
    }
}

extension CgroupSupport {
    /// Why a launch whose policy limits the whole sandbox's memory cannot run here, and the
    /// ways out: a delegated cgroup, or the policy's explicit per-process opt-in.
    static func noMemoryCgroupMessage(limitBytes: UInt64) -> String {
        let mib = limitBytes >> 20
        return "the policy limits the memory of the whole sandbox (\(mib) MiB), but no memory cgroup is writable here, "
            + "and per-process limits (RLIMIT_AS) would let its processes together hold many times that. "
            + "Run it in a cgroup delegated to you: on cgroup v2, "
            + "`systemd-run --user --scope -p Delegate=yes -- extsandbox exec …` (or any cgroup you may write whose "
            + "cgroup.subtree_control enables memory and pids); on cgroup v1, a memory cgroup an admin made writable "
            + "for you, or run as root. Or accept per-process limits in the policy: `limits: { memory-scope: per-process }`"
    }
}
