import CFuseSupport
import Dispatch
import Glibc
import Synchronization
import Testing
@testable import ExtSandbox

/// A closed ``DirectoryWatcher`` no longer owns its inotify descriptor's number: the kernel hands
/// that number to the next file opened, so a late ``DirectoryWatcher/add(_:)`` or
/// ``DirectoryWatcher/prune(keeping:)`` (a scan that was running while the monitor closed it)
/// must not make a system call on it.
@Suite("A closed directory watcher")
struct DirectoryWatcherTests {
    @Test("add after close does not watch a directory on the file that now has the number")
    func addAfterCloseLeavesTheNumbersNewOwnerAlone() throws {
        let directory = try Self.makeDirectory()
        defer { Self.remove(directory) }
        let (watcher, other) = try Self.closedWatcherWhoseNumberIsReused()
        defer { close(other) }

        watcher.add(directory)

        let created = open(directory + "/new", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
        #expect(created >= 0)
        close(created)
        #expect(Self.pendingEvents(other) == 0, "the closed watcher added a watch to the descriptor that reused its number")
    }

    @Test("prune after close does not remove a watch of the file that now has the number")
    func pruneAfterCloseLeavesTheNumbersNewOwnerAlone() throws {
        let directory = try Self.makeDirectory()
        defer { Self.remove(directory) }
        let (watcher, other) = try Self.closedWatcherWhoseNumberIsReused { $0.add(directory) }
        defer { close(other) }
        // The first watch of an instance gets descriptor 1, in the watcher's as in this one.
        let wd = inotify_add_watch(other, directory, UInt32(IN_CREATE))
        try #require(wd >= 0)

        watcher.prune(keeping: [])

        #expect(inotify_rm_watch(other, wd) == 0, "the closed watcher removed a watch of the descriptor that reused its number")
    }

    /// How often a test tries to get the freed number back before it gives up: another test's
    /// thread may open a file between the close and the test's `inotify_init1`.
    static let attempts = 50

    /// A watcher that did `before`, closed, and an inotify instance of the test's own that got
    /// the watcher's old number.
    static func closedWatcherWhoseNumberIsReused(_ before: (DirectoryWatcher) -> Void = { _ in }) throws -> (DirectoryWatcher, Int32) {
        for _ in 0..<attempts {
            let watcher = try DirectoryWatcher()
            before(watcher)
            let number = watcher.fd.rawValue
            watcher.close()
            let other = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
            if other == number { return (watcher, other) }
            if other >= 0 { close(other) }
        }
        throw SetupFailed("another thread kept taking the freed number")
    }

    struct SetupFailed: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// The bytes of events waiting on the non-blocking inotify descriptor `fd` (0: none).
    static func pendingEvents(_ fd: Int32) -> Int {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        return max(count, 0)
    }

    static func makeDirectory() throws -> String {
        var template = Array("/tmp/xsb-watcher-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SetupFailed("mkdtemp: errno \(errno)")
        }
        return String(cString: made)
    }

    static func remove(_ directory: String) {
        unlink(directory + "/new")
        rmdir(directory)
    }
}

/// Watches are kept by the directory's bytes, as the kernel names it.
@Suite("directory watcher: paths as bytes")
struct DirectoryWatcherSpellingTests {
    /// Before: keyed by the path as a Swift string, the second of two directories whose names
    /// are two spellings of one character took the first's entry, so the first's events came
    /// with no directory (and a prune keeping one spelling kept both).
    @Test("two directories whose names are two spellings of one character are two watches")
    func twoSpellingsAreTwoWatches() throws {
        let root = try DirectoryWatcherTests.makeDirectory()
        let composed = root + "/\u{E9}", decomposed = root + "/e\u{301}"
        defer {
            unlink(composed + "/new")
            rmdir(composed)
            rmdir(decomposed)
            rmdir(root)
        }
        try #require(mkdir(composed, 0o755) == 0 && mkdir(decomposed, 0o755) == 0)
        let (watcher, received) = try Self.startedWatcher()
        defer { watcher.close() }
        watcher.add(composed)
        watcher.add(decomposed)
        #expect(watcher.watchedDirectories.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
            == [Array(composed.utf8), Array(decomposed.utf8)].sorted { $0.lexicographicallyPrecedes($1) })

        let seen = try #require(received.afterCreating("new", in: composed), "no event for the file made in the first directory")
        #expect(Array(seen.directory.utf8) == Array(composed.utf8), "the event came from \(Array(seen.directory.utf8))")

        watcher.prune(keeping: [decomposed])
        #expect(watcher.watchedDirectories.map { Array($0.utf8) } == [Array(decomposed.utf8)])
    }

    /// Before: the kernel's one watch for two names of one directory (here a symlink; also two
    /// spellings on a case-folding file system) was filed under the name added last, so the
    /// other's events came under that name, and pruning that name removed the watch for both.
    @Test("two names of one directory share its watch: each hears its events, and keeps it while watched")
    func twoNamesOfOneDirectory() throws {
        let root = try DirectoryWatcherTests.makeDirectory()
        let real = root + "/real", alias = root + "/alias"
        defer {
            unlink(real + "/first")
            unlink(real + "/second")
            unlink(alias)
            rmdir(real)
            rmdir(root)
        }
        try #require(mkdir(real, 0o755) == 0 && symlink(real, alias) == 0)
        let (watcher, received) = try Self.startedWatcher()
        defer { watcher.close() }
        watcher.add(real)
        watcher.add(alias)
        func directories(hearing name: String, count: Int) -> [String] {
            let created = open(real + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            close(created)
            var seen: [String] = []
            for _ in 0..<1000 {
                seen = received.events.withLock { events in events.filter { $0.name == name && $0.mask & UInt32(IN_CREATE) != 0 }.map(\.directory) }
                if seen.count >= count { break }
                usleep(5000)
            }
            return seen.sorted()
        }
        #expect(directories(hearing: "first", count: 2) == [alias, real].sorted())
        watcher.prune(keeping: [real])
        #expect(watcher.watchedDirectories == [real])
        #expect(directories(hearing: "second", count: 1) == [real])
    }

    /// A watcher reading its events into the returned collection (the caller closes it).
    static func startedWatcher() throws -> (DirectoryWatcher, Received) {
        let watcher = try DirectoryWatcher()
        let received = Received()
        try watcher.start { batch in received.events.withLock { $0 += batch } }
        return (watcher, received)
    }

    /// The events the watcher delivered (on the epoll thread).
    final class Received: Sendable {
        let events = Mutex<[DirectoryWatcher.Event]>([])

        /// Creates the file `name` in `directory`, then waits up to 5 s for the first event
        /// named `name`.
        func afterCreating(_ name: String, in directory: String) -> DirectoryWatcher.Event? {
            let created = open(directory + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            #expect(created >= 0)
            close(created)
            for _ in 0..<1000 {
                if let event = events.withLock({ events in events.first { $0.name == name } }) { return event }
                usleep(5000)
            }
            return nil
        }
    }
}

/// The epoll thread that reads the watcher's events reads every sandbox's end too, for the whole
/// host: a directory on a hung mount (FUSE, NFS) may block its `add` for good, and must hold up
/// nothing there.
@Suite("directory watcher: a hung mount")
struct DirectoryWatcherHungMountTests {
    /// Before: `add` held the table's lock across `inotify_add_watch`, and the epoll thread took
    /// that lock for each event, so it waited for the hung lookup with every other event behind it.
    @Test("an add blocked on a hung mount holds up no other directory's events")
    func blockedAddLeavesEventsFlowing() throws {
        let watched = try DirectoryWatcherTests.makeDirectory()
        let mountPoint = try DirectoryWatcherTests.makeDirectory()
        defer {
            DirectoryWatcherTests.remove(watched)
            rmdir(mountPoint)
        }
        let (watcher, received) = try DirectoryWatcherSpellingTests.startedWatcher()
        // Closed only once no add is blocked: `close` would wait for it (the closure that runs the
        // add keeps the watcher alive otherwise).
        var addReturned = true
        defer { if addReturned { watcher.close() } }
        watcher.add(watched)

        var step: UnsafePointer<CChar>?
        let fuse = xsb_fuse_hang_mount(mountPoint, &step)
        if fuse < 0 {
            let reason = "skipped: the kernel refused a FUSE mount here (\(step.map { String(cString: $0) } ?? "?"): \(String(cString: strerror(-fuse))))"
            print("DirectoryWatcherHungMountTests: \(reason)")
            try Test.cancel(Comment(rawValue: reason))
        }
        // Whatever fails below: the connection is aborted, so the blocked add returns and nothing
        // stays mounted.
        var aborted = false
        let returned = DispatchSemaphore(value: 0)
        defer {
            if !aborted {
                xsb_fuse_hang_abort(mountPoint, fuse)
                addReturned = returned.wait(timeout: .now() + 10) == .success
            }
        }

        addReturned = false
        DispatchQueue.global().async {
            watcher.add(mountPoint + "/sub")
            returned.signal()
        }
        // The file system has the lookup: the add is blocked in it.
        try #require(xsb_fuse_hang_wait_request(fuse, 5000) == 1, "the add made no request of the hung file system")

        let event = received.afterCreating("new", in: watched)
        #expect(event?.directory == watched, "no event within 5 s for the file made in a watched directory while an add was blocked")

        xsb_fuse_hang_abort(mountPoint, fuse)
        aborted = true
        addReturned = returned.wait(timeout: .now() + 10) == .success
        #expect(addReturned, "the add still blocked after the connection was aborted")
        // The aborted lookup failed, not as a missing directory: nothing else is watched.
        #expect(watcher.watchedDirectories == [watched])
    }
}
