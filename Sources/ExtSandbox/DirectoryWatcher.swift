import Glibc
import SandboxPolicy
import SandboxRuntime
import SandboxSystem
import Synchronization

/// Directories watched with inotify, read on the supervisor's epoll thread (no thread of its
/// own, no polling). A directory that does not exist yet is watched through its nearest
/// existing ancestor, so that its creation is seen.
///
/// The watched set is what the last scan named: ``add(_:)`` is called for each directory
/// *before* the scan lists it (so nothing lands unseen between the listing and the watch), and
/// ``prune(keeping:)`` drops the rest afterwards.
final class DirectoryWatcher: Sendable {
    /// One change in a watched directory.
    struct Event: Sendable {
        var directory: String
        var name: String
        var mask: UInt32
        var overflowed: Bool { mask & UInt32(IN_Q_OVERFLOW) != 0 }
    }

    static let mask = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

    private struct Watches {
        /// Every path watched through each watch: the kernel hands out one watch per directory,
        /// so two names of one directory (a symlink, another spelling on a case-folding file
        /// system) share it, and each must hear its events and keep it while watched.
        var byDescriptor: [Int32: [String]] = [:]
        /// Keyed by the path's bytes, as the kernel names directories: as strings, two spellings
        /// of one character (a precomposed "é", "e" with a combining accent) would share an entry.
        var byPath: [[UInt8]: Int32] = [:]
        /// The watches the kernel dropped (IN_IGNORED) while an ``DirectoryWatcher/add(_:)`` was
        /// between its `inotify_add_watch` and its entry (nil: none was): the watch it got may be
        /// gone already, and must then not be entered.
        var ignoredDuringAdd: Set<Int32>?

        /// Drops `path` (by bytes) from the names watched through `wd`. Returns true when none is
        /// left: the watch itself is then no one's.
        mutating func forget(_ path: String, from wd: Int32) -> Bool {
            byDescriptor[wd]?.removeAll { FilePaths.isSame($0, path) }
            guard byDescriptor[wd]?.isEmpty ?? true else { return false }
            byDescriptor[wd] = nil
            return true
        }
    }

    /// The table of watches, shared with the epoll thread's handler. Its lock is held for table
    /// work only, never across a system call: the epoll thread, which every sandbox's end also
    /// waits for, takes it for each event, and a path lookup may block for good (a hung mount).
    private final class Table: Sendable {
        let watches = Mutex(Watches())
    }

    /// What ``add(_:)`` made of the watch the kernel gave it.
    private enum Entry {
        case failed(Int32)
        /// Entered; the watch the path had before, when that is now no one's, to remove.
        case entered(replacing: Int32?)
    }

    /// Whether the fd is still this watcher's, and the monitor's registration.
    private struct Lifetime {
        /// The monitor's registration, from ``start(onEvents:)`` until ``close()``.
        var token: UInt64?
        var closed = false
    }

    /// The inotify instance, borrowed by the monitor while watched. Its number is only passed to
    /// a system call under `lifetime`'s lock while `closed` is false: ``close()`` sets `closed`
    /// under that lock before it closes the number, which may then be any file's. (The epoll
    /// thread reads it without that lock: the monitor's `remove` waits for that read to end.)
    /// (Not private: the tests reopen its number after a close.)
    let fd: FileDescriptor
    private let table = Table()
    /// Held by ``add(_:)``, ``prune(keeping:)`` and ``close()`` around their system calls, which
    /// it also keeps one at a time; never taken on the epoll thread.
    private let lifetime = Mutex(Lifetime())

    /// An inotify instance that watches nothing yet and is not read: ``start(onEvents:)``
    /// starts reading it. Throws the failed `inotify_init1` (step `control`, its `errno`).
    init() throws(SandboxError) {
        guard let fd = FileDescriptor(adopting: inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))) else {
            throw SandboxError(step: .control, errorNumber: errno, detail: "inotify_init1")
        }
        self.fd = fd
    }

    /// Reads the events from now on, on the epoll thread: `onEvents` runs there with each batch
    /// read, and must not block. Called once, by an owner that is complete (an initializer's
    /// last step, before its first ``add(_:)``): nothing is delivered to a half-made owner.
    /// Throws the monitor's refusal (step `control`, `epoll_ctl add`). Does nothing once closed.
    func start(onEvents: @escaping @Sendable ([Event]) -> Void) throws(SandboxError) {
        let fd = self.fd, table = self.table
        // Under the lock, so that a `close` meanwhile either comes first or finds the token.
        try lifetime.withLock { (lifetime: inout Lifetime) throws(SandboxError) in
            guard !lifetime.closed, lifetime.token == nil else { return }
            do throws(EventMonitor.Failure) {
                lifetime.token = try Supervisor.shared.monitor.add(fd: fd, events: EventMonitor.readable) { _ in
                    onEvents(Self.drain(fd: fd.rawValue, table: table))
                }
            } catch {
                throw SandboxError(error)
            }
        }
    }

    deinit { close() }

    /// Watches `directory`, or its nearest existing ancestor while it does not exist.
    /// Does nothing once closed. May block as long as the path's lookup does (a hung mount);
    /// the events of the other directories are read meanwhile.
    func add(_ directory: String) {
        let fd = self.fd, table = self.table
        var path = directory
        while !path.isEmpty {
            let failure = lifetime.withLock { lifetime -> Int32? in
                guard !lifetime.closed else { return nil }
                table.watches.withLock { $0.ignoredDuringAdd = [] }
                let wd = inotify_add_watch(fd.rawValue, path, Self.mask)
                let failure = wd < 0 ? errno : 0
                let entry = table.watches.withLock { watches -> Entry in
                    defer { watches.ignoredDuringAdd = nil }
                    guard wd >= 0 else { return .failed(failure) }
                    // Dropped already (the directory went meanwhile): as if it was not there.
                    if watches.ignoredDuringAdd?.contains(wd) == true { return .failed(ENOENT) }
                    let key = Array(path.utf8)
                    var replaced: Int32?
                    if let old = watches.byPath[key], old != wd, watches.forget(path, from: old) { replaced = old }
                    if !(watches.byDescriptor[wd] ?? []).contains(where: { FilePaths.isSame($0, path) }) {
                        watches.byDescriptor[wd, default: []].append(path)
                    }
                    watches.byPath[key] = wd
                    return .entered(replacing: replaced)
                }
                switch entry {
                case .failed(let failure): return failure
                case .entered(let replaced):
                    if let replaced { inotify_rm_watch(fd.rawValue, replaced) }
                    return nil
                }
            }
            guard let failure, failure == ENOENT || failure == ENOTDIR, !FilePaths.isSame(path, "/") else { return }
            path = FilePaths.directory(of: path)
        }
    }

    /// Stops watching what is not in `paths` (nor an ancestor standing in for one of them),
    /// matched by bytes. Does nothing once closed.
    func prune(keeping paths: some Sequence<String>) {
        // The ancestors standing in are found before any lock: a stat may block (a hung mount).
        var keep: Set<[UInt8]> = []
        for path in paths {
            keep.insert(Array(path.utf8))
            var ancestor = path
            while SystemFiles.kind(of: ancestor) == nil && !FilePaths.isSame(ancestor, "/") && !ancestor.isEmpty {
                ancestor = FilePaths.directory(of: ancestor)
                keep.insert(Array(ancestor.utf8))
            }
        }
        let fd = self.fd, table = self.table
        lifetime.withLock { lifetime in
            guard !lifetime.closed else { return }
            let unwatched = table.watches.withLock { watches -> [Int32] in
                var unwatched: [Int32] = []
                let stale = watches.byPath.filter { !keep.contains($0.key) }
                for (key, wd) in stale {
                    watches.byPath[key] = nil
                    // The watch goes with the last name watched through it.
                    if watches.forget(String(decoding: key, as: UTF8.self), from: wd) { unwatched.append(wd) }
                }
                return unwatched
            }
            for wd in unwatched { inotify_rm_watch(fd.rawValue, wd) }
        }
    }

    /// The watched directories, one per spelling, in byte order.
    var watchedDirectories: [String] {
        let keys = table.watches.withLock { watches in watches.byPath.keys.sorted { $0.lexicographicallyPrecedes($1) } }
        return keys.map { String(decoding: $0, as: UTF8.self) }
    }

    /// Stops watching and closes the fd. Waits for an ``add(_:)`` or ``prune(keeping:)`` in
    /// progress, however long its path lookup takes. It may run on the epoll thread (a monitor's
    /// last reference let go in its own event handler), but then no add or prune is in progress:
    /// the monitor holds itself while it scans.
    func close() {
        let (wasOpen, token) = lifetime.withLock { lifetime -> (Bool, UInt64?) in
            defer { lifetime.closed = true; lifetime.token = nil }
            return (!lifetime.closed, lifetime.token)
        }
        guard wasOpen else { return }
        // `remove` waits for a running handler: after it, nothing reads the number.
        if let token { Supervisor.shared.monitor.remove(fd: fd, token: token) }
        fd.close()
    }

    /// Reads every pending event (the fd is non-blocking).
    private static func drain(fd: Int32, table: Table) -> [Event] {
        var events: [Event] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { bytes in retryingInterrupts { read(fd, bytes.baseAddress, bytes.count) } }
            guard count > 0 else { break }
            buffer.withUnsafeBytes { raw in
                var offset = 0
                let header = MemoryLayout<inotify_event>.size
                while offset + header <= count {
                    let wd = raw.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                    let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    let nameBytes = raw[(offset + header)..<min(count, offset + header + length)].prefix { $0 != 0 }
                    let name = String(decoding: nameBytes, as: UTF8.self)
                    let directories = table.watches.withLock { watches -> [String] in
                        if mask & UInt32(IN_IGNORED) != 0 { watches.ignoredDuringAdd?.insert(wd) }
                        guard let paths = watches.byDescriptor[wd] else { return [""] }
                        if mask & UInt32(IN_IGNORED) != 0 {
                            watches.byDescriptor[wd] = nil
                            for path in paths where watches.byPath[Array(path.utf8)] == wd { watches.byPath[Array(path.utf8)] = nil }
                        }
                        return paths
                    }
                    for directory in directories { events.append(Event(directory: directory, name: name, mask: mask)) }
                    offset += header + length
                }
            }
        }
        return events
    }
}
