import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem
import Synchronization

/// Pre-built, single-use sandboxes, kept ready for warm launches (``Supervisor/prepare(_:count:)``).
///
/// A pre-built sandbox is cloned and built like a cold one (namespaces, ids, cgroups, hostname,
/// loopback, the whole file system) and then waits, its init as PID 1, for a launch to hand it
/// what is per launch: the program, its arguments, environment, working directory and fds. It
/// runs that one payload and ends with it; it is never reused. Sandboxes are kept per *shape*
/// (``Key``): everything of a launch but what is per launch, the final mount plan included, so
/// that a warm launch gets exactly the sandbox a cold one would have built.
///
/// The pool holds nothing unless a host asks: every idle sandbox costs memory
/// (``Supervisor/poolStatus``). Its sandboxes die with the supervisor's process, as every
/// sandbox does, and ``Supervisor/drainPool()`` ends them on request.
final class SandboxPool: Sendable {
    /// What fixes a sandbox before its program is known.
    struct Key: Equatable, Sendable {
        let policy: Policy
        let filter: CompiledSeccompFilter
        /// The final plan: policy binds, extra and data mounts, the program's own bind.
        let plan: MountPlan
        let hostname: String
        let audit: Bool
        let sandboxUID: UInt32
        let sandboxGID: UInt32
        let identity: HostIdentity
        /// Its payload waits for the launch, started with the shape (`waiting_payload.c`).
        let payloadWaits: Bool

        /// Every field; the plan's paths and the hostname as bytes, as the kernel takes them
        /// (String's `==` would take two spellings of one character as one).
        static func == (a: Key, b: Key) -> Bool {
            a.plan == b.plan && FilePaths.isSame(a.hostname, b.hostname) && a.policy == b.policy && a.filter == b.filter
                && a.audit == b.audit && a.sandboxUID == b.sandboxUID && a.sandboxGID == b.sandboxGID
                && a.identity == b.identity && a.payloadWaits == b.payloadWaits
        }
    }

    /// A bind source as it was when a sandbox was built: a different file there now means the
    /// sandbox shows what is no longer at that path.
    struct BindSourceIdentity: Equatable, Sendable {
        let path: String
        let device: UInt64
        let inode: UInt64

        /// What is at `path` now (device and inode 0: nothing readable).
        init(_ path: String) {
            var info = stat()
            let found = stat(path, &info) == 0
            self.path = path
            device = found ? UInt64(info.st_dev) : 0
            inode = found ? UInt64(info.st_ino) : 0
        }

        /// Whether the same file is at the path still.
        var isCurrent: Bool { self == BindSourceIdentity(path) }

        /// The identities of `plan`'s bind sources, and of the host files its nested binds sit on
        /// (replaced, the kernel detaches those mounts in the idle sandbox too; masks sit on the
        /// sandbox's own files: ``MountPlan/nestedMountPoints``).
        static func of(_ plan: MountPlan) -> [BindSourceIdentity] {
            plan.operations.compactMap { operation -> BindSourceIdentity? in
                if case .bind(let source, _, _, _, _) = operation { return BindSourceIdentity(source) }
                return nil
            } + plan.nestedMountPoints.map(BindSourceIdentity.init)
        }
    }

    /// One pre-built sandbox, its init waiting for a launch.
    final class Ready: Sendable {
        /// The init's pid, pidfd and control socket.
        let started: xsb_spawn_result
        /// The control socket while the sandbox is idle: the pool owns it until a launch takes
        /// the sandbox (``handOver()``), which passes the number on to the C launch.
        let control: FileDescriptor?
        let cgroup: SandboxCgroup?
        let bindSources: [BindSourceIdentity]
        /// The monitor's watch of the control socket while it is idle (its end is its death).
        let watch = Mutex<UInt64?>(nil)

        /// The shape it was built as: only a launch of exactly that shape may take it.
        let key: Key

        init(started: xsb_spawn_result, key: Key, cgroup: SandboxCgroup?, bindSources: [BindSourceIdentity]) {
            self.key = key
            self.started = started
            control = FileDescriptor(adopting: started.control_fd)
            self.cgroup = cgroup
            self.bindSources = bindSources
        }

        /// Ends it: its init reads the control socket's end (or the SIGKILL) and goes, taking
        /// the namespaces and mounts with it; reaped, its fds closed and its cgroup removed.
        /// Blocks until the kernel has let go: never on the monitor thread.
        func discard() {
            SandboxSignals.kill(pidfd: started.pidfd)
            control?.close()
            _ = xsb_pidfd_wait(started.pidfd)
            close(started.pidfd)
            cgroup?.remove()
        }

        /// Gives the control socket's number to the launch that took this sandbox (its owner
        /// from now on: the C launch, then the launched process).
        func handOver() -> Int32 {
            control?.release() ?? -1
        }
    }

    /// The sandboxes kept for one shape, however many callers reserved them.
    private struct Shelf {
        /// Stable while the shelf lives, unlike its key: what a reservation names.
        let id: UInt64
        var key: Key
        /// The shape, as a configuration: what a refill builds.
        let configuration: SandboxConfiguration
        /// How many each reservation keeps: two callers of one shape keep the sum, and one's
        /// release leaves the other's.
        var reservations: [UInt64: Int] = [:]
        var ready: [Ready] = []
        var building = 0

        var target: Int { reservations.values.reduce(0, +) }
    }

    private struct State {
        var shelves: [Shelf] = []
        var refilling = false
        /// Programs of warm launches in their first moments (see
        /// ``programStarted(_:)``), with the monotonic time (ns) after which each
        /// counts as started even if no one said so.
        var starting: [ObjectIdentifier: UInt64] = [:]

        /// Since when refills have been held back (nil: they are not).
        var heldSince: UInt64?

        /// Whether a refill waits for starting programs now: while one is in its first moments.
        /// A shelf with none ready (whose next launch would be cold) waits at most
        /// `emptyShelfHold` in all, so that a steady stream of launches never keeps it empty.
        mutating func holdsRefill(at now: UInt64, emptyShelfHold: UInt64) -> Bool {
            // A deadline long past is a settle nobody reported (it is not waited for forever).
            starting = starting.filter { $0.value > now }
            guard !starting.isEmpty else {
                heldSince = nil
                return false
            }
            let since = heldSince ?? now
            heldSince = since
            // (The hold's start stays until no program starts: past it, an empty shelf is built
            // for at every check, until it has one ready.)
            return now - since < emptyShelfHold || !shelves.contains { $0.ready.isEmpty && $0.building < $0.target }
        }
        /// Bumped by a drain: what was being built before it is discarded when done.
        var generation = 0
        /// Numbers shelves and reservations.
        var lastID: UInt64 = 0

        mutating func nextID() -> UInt64 {
            lastID += 1
            return lastID
        }
    }

    private let state = Mutex(State())
    /// The most pre-built sandboxes kept at once, all shapes together.
    let capacity: Int
    /// Warm launches between their take and their `READY`: a refill waits for them as for the
    /// spawner thread's launches, since on a machine with few CPUs a sandbox built beside a warm
    /// launch takes the CPU the launch's init and payload need.
    private let warmLaunches = Atomic<Int>(0)

    /// Whether a warm launch a caller waits for is under way.
    var isLaunching: Bool { warmLaunches.load(ordering: .relaxed) > 0 }

    init(capacity: Int = 64) {
        self.capacity = capacity
    }

    /// Takes a ready sandbox of `key`'s shape, if one is kept (the caller then owns it, and
    /// calls ``launchEnded()`` once its launch has its answer).
    func take(_ key: Key) -> Ready? {
        // A shelf follows its shape when the world changes under it (a mask's path appeared, a
        // symbolic link was retargeted): what it built before then is another shape, never handed out.
        let (ready, outdated) = state.withLock { state -> (Ready?, [Ready]) in
            guard let index = state.shelves.firstIndex(where: { $0.key == key }) else { return (nil, []) }
            var outdated: [Ready] = []
            while !state.shelves[index].ready.isEmpty {
                let first = state.shelves[index].ready.removeFirst()
                if first.key == key { return (first, outdated) }
                outdated.append(first)
            }
            return (nil, outdated)
        }
        for sandbox in outdated { stopWatching(sandbox) }
        Self.discardInBackground(outdated)
        if let ready {
            warmLaunches.add(1, ordering: .relaxed)
            stopWatching(ready)
        }
        return ready
    }

    /// Discards `sandboxes` on a thread of their own (a discard blocks until the kernel has let
    /// go), returning at once.
    static func discardInBackground(_ sandboxes: [Ready]) {
        guard !sandboxes.isEmpty else { return }
        let body: @Sendable () -> Void = { for sandbox in sandboxes { sandbox.discard() } }
        do { try SupervisorThread.start(name: "xsb-pool-drop", stackSize: 256 << 10, body) } catch { body() }
    }

    /// Discards `sandboxes` on a thread of their own and returns once they are gone, leaving the
    /// caller's thread (one of Swift's few cooperative ones) free meanwhile.
    static func discard(_ sandboxes: [Ready]) async {
        guard !sandboxes.isEmpty else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let body: @Sendable () -> Void = {
                for sandbox in sandboxes { sandbox.discard() }
                continuation.resume()
            }
            do { try SupervisorThread.start(name: "xsb-pool-drop", stackSize: 256 << 10, body) } catch { body() }
        }
    }

    /// A taken sandbox's launch has its answer (`READY`, a failure, or the sandbox discarded).
    func launchEnded() {
        warmLaunches.subtract(1, ordering: .relaxed)
    }

    /// Removes `ready` from its shelf if it is still there (nobody took it). Whoever removes it owns it.
    func claim(_ ready: Ready) -> Bool {
        state.withLock { state in
            for index in state.shelves.indices {
                if let at = state.shelves[index].ready.firstIndex(where: { $0 === ready }) {
                    state.shelves[index].ready.remove(at: at)
                    return true
                }
            }
            return false
        }
    }

    private func stopWatching(_ ready: Ready) {
        let token = ready.watch.withLock { token in
            defer { token = nil }
            return token
        }
        if let token, let control = ready.control { watchMonitor.withLock { $0 }?.remove(fd: control, token: token) }
    }

    /// The monitor that watches idle sandboxes (the supervisor's), set at the first build.
    private let watchMonitor = Mutex<EventMonitor?>(nil)

    /// Keeps `count` more of `configuration`'s shape (built as `key`), until the reservation is
    /// released.
    func reserve(_ key: Key, _ configuration: SandboxConfiguration, count: Int) throws(SandboxError) -> SandboxReservation {
        try state.withLock { (state: inout State) throws(SandboxError) -> SandboxReservation in
            let kept = state.shelves.reduce(0) { $0 + $1.target }
            guard count >= 1, kept + count <= capacity else {
                throw SandboxError(
                    step: .configuration, errorNumber: count >= 1 ? E2BIG : EINVAL,
                    detail: count >= 1
                        ? "a pool of \(count) more pre-built sandboxes, with \(kept) kept already, is more than the supervisor keeps (\(capacity))"
                        : "a pool of \(count) pre-built sandboxes (release a reservation to keep fewer)")
            }
            let reservation = state.nextID()
            if let index = state.shelves.firstIndex(where: { $0.key == key }) {
                state.shelves[index].reservations[reservation] = count
                return SandboxReservation(shelf: state.shelves[index].id, id: reservation)
            }
            var shelf = Shelf(id: state.nextID(), key: key, configuration: configuration)
            shelf.reservations[reservation] = count
            state.shelves.append(shelf)
            return SandboxReservation(shelf: shelf.id, id: reservation)
        }
    }

    /// Keeps what `reservation` kept no longer. Those its shelf no longer needs are returned,
    /// unwatched, for the caller to discard. Found by the shelf's identity, not its shape: a shelf
    /// that followed its shape since (``built(_:onShelf:as:generation:)``) is still released.
    func release(_ reservation: SandboxReservation) -> [Ready] {
        let dropped = state.withLock { state -> [Ready] in
            guard let index = state.shelves.firstIndex(where: { $0.id == reservation.shelf }) else { return [] }
            state.shelves[index].reservations[reservation.id] = nil
            let surplus = max(0, state.shelves[index].ready.count - state.shelves[index].target)
            let dropped = Array(state.shelves[index].ready.prefix(surplus))
            state.shelves[index].ready.removeFirst(surplus)
            if state.shelves[index].target == 0 && state.shelves[index].building == 0 { state.shelves.remove(at: index) }
            return dropped
        }
        for ready in dropped { stopWatching(ready) }
        return dropped
    }

    /// The next shelf short of its target (only shelf `only`, when given), counted as being
    /// built (nil: none; without `only`, the refill that asked ends).
    func nextToBuild(only shelf: UInt64? = nil) -> (shelf: UInt64, configuration: SandboxConfiguration, generation: Int)? {
        state.withLock { state in
            guard let index = state.shelves.firstIndex(where: { (shelf == nil || $0.id == shelf) && $0.ready.count + $0.building < $0.target }) else {
                if shelf == nil { state.refilling = false }
                return nil
            }
            state.shelves[index].building += 1
            return (state.shelves[index].id, state.shelves[index].configuration, state.generation)
        }
    }

    /// Whether a refill should start (none runs yet, and none is held for a starting program:
    /// ``programStarted(_:)``); marks one as running.
    func startRefill() -> Bool {
        let now = Self.monotonicNanoseconds()
        return state.withLock { state in
            guard !state.refilling, !state.holdsRefill(at: now, emptyShelfHold: emptyShelfHold) else { return false }
            state.refilling = true
            return true
        }
    }

    /// A build for shelf `shelf` ended: shelves `ready` (built as `built`) if the shelf still
    /// wants it. Returns false when it must be discarded instead.
    func built(_ ready: Ready?, onShelf shelf: UInt64, as built: Key?, generation: Int) -> Bool {
        state.withLock { state in
            guard let index = state.shelves.firstIndex(where: { $0.id == shelf }) else { return false }
            state.shelves[index].building -= 1
            // The world changed under the shape (a bind source is another file now): later
            // launches compute the new key, so the shelf follows it.
            if let built, built != state.shelves[index].key { state.shelves[index].key = built }
            guard let ready, state.generation == generation,
                  state.shelves[index].ready.count < state.shelves[index].target else {
                // A shelf no longer kept goes once nothing is built for it.
                if state.shelves[index].target == 0 && state.shelves[index].building == 0 && state.shelves[index].ready.isEmpty {
                    state.shelves.remove(at: index)
                }
                return false
            }
            state.shelves[index].ready.append(ready)
            return true
        }
    }

    /// Stops refilling and takes every idle sandbox out (the caller discards them).
    func emptyAll() -> [Ready] {
        let taken = state.withLock { state -> [Ready] in
            state.generation += 1
            let all = state.shelves.flatMap(\.ready)
            for index in state.shelves.indices {
                state.shelves[index].ready = []
                state.shelves[index].reservations = [:]
            }
            state.shelves.removeAll { $0.building == 0 }
            return all
        }
        for ready in taken { stopWatching(ready) }
        return taken
    }

    var all: (ready: [Ready], building: Int) {
        state.withLock { state in (state.shelves.flatMap(\.ready), state.shelves.reduce(0) { $0 + $1.building }) }
    }

    /// Whether shelf `shelf` has fewer ready than it keeps while some are being built.
    func awaitsRefill(_ shelf: UInt64) -> Bool {
        state.withLock { state in
            state.shelves.contains { $0.id == shelf && $0.ready.count < $0.target && $0.building > 0 }
        }
    }

    /// Whether any shape is kept (a launch then looks for its own).
    var keepsAny: Bool { state.withLock { !$0.shelves.isEmpty } }

    /// A refill that failed: the next launch of a kept shape starts another.
    func stopRefilling() {
        state.withLock { $0.refilling = false }
    }

    /// How long a warm launch's program counts as starting, at most (milliseconds; a test may
    /// lengthen it).
    let startingMilliseconds = Atomic<Int>(10)

    /// How long a shelf with none ready waits for starting programs, at most (the same as a
    /// program's first moments).
    private var emptyShelfHold: UInt64 { UInt64(startingMilliseconds.load(ordering: .relaxed)) * 1_000_000 }

    /// `process`'s program was just exec'd in a pre-built sandbox. Until ``programSettled(_:)``
    /// (its end, or ``startingMilliseconds`` later, which the caller reports) no refill builds
    /// (a shelf with none ready waits that long at most): a program's first moments (a runtime
    /// starting, an extension's first reply) are what the pool is there to make fast, and on a
    /// machine with few CPUs a sandbox built beside them takes the CPU they need. After twice
    /// that time it counts as settled even if no one said so.
    func programStarted(_ process: ObjectIdentifier) {
        let deadline = Self.monotonicNanoseconds() + UInt64(2 * startingMilliseconds.load(ordering: .relaxed)) * 1_000_000
        state.withLock { $0.starting[process] = deadline }
    }

    /// `process`'s program has ended or had its first moments (the caller then refills).
    func programSettled(_ process: ObjectIdentifier) {
        _ = state.withLock { $0.starting.removeValue(forKey: process) }
    }

    /// How many programs of warm launches count as starting.
    var programsStarting: Int {
        let now = Self.monotonicNanoseconds()
        return state.withLock { state in state.starting.values.filter { $0 > now }.count }
    }

    /// For a refill about to build: stops it (true) while it is held for a starting program;
    /// that program's ``programSettled(_:)`` starts the next. One lock with ``startRefill()``,
    /// so that a program settling meanwhile always finds the refill either going on or stopped.
    func stopRefillingWhileProgramsStart() -> Bool {
        let now = Self.monotonicNanoseconds()
        return state.withLock { state in
            guard state.holdsRefill(at: now, emptyShelfHold: emptyShelfHold) else { return false }
            state.refilling = false
            return true
        }
    }

    private static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    func setMonitor(_ monitor: EventMonitor) {
        watchMonitor.withLock { $0 = monitor }
    }
}

/// Pre-built sandboxes kept for one caller: what ``Supervisor/prepare(_:count:)`` returns and
/// ``Supervisor/release(_:)`` ends. Callers that prepare the same shape share its sandboxes and
/// keep the sum of their counts; each release takes back only its own.
public struct SandboxReservation: Sendable, Hashable {
    let shelf: UInt64
    let id: UInt64
}

/// What the pool holds now and what it costs.
public struct SandboxPoolStatus: Sendable, Equatable {
    /// Pre-built sandboxes waiting for a launch.
    public var ready: Int
    /// Being built (refills and ``Supervisor/prepare(_:count:)``).
    public var building: Int
    /// The memory the ready ones hold: for each, its memory cgroup's `memory.current` (kernel
    /// memory included) when it has one, else the proportional set size of its init (user
    /// memory only: the kernel's part of its namespaces and mounts is not counted).
    public var idleMemoryBytes: Int
}
