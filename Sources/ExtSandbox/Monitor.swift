import Dispatch
import ExtensionCatalog
import FoundationEssentials
import Glibc
import Observation
import SandboxPolicy
import SandboxRuntime
import SandboxSystem
import Synchronization

extension AppExtensionPoint {
    /// Discovers the extensions of one or more points and follows changes (ExtensionFoundation's
    /// `AppExtensionPoint.Monitor`).
    ///
    /// Its initializer returns a validated snapshot: ``identities`` are the installed extensions
    /// that are approved (bundled, or approved by the owner for their current contents) and
    /// enabled; ``state`` also counts the disabled and unapproved ones and lists invalid bundles.
    /// ``updates`` delivers a new state whenever a bundle is installed, removed or changed, or
    /// the owner approves, revokes, enables or disables one (from any process): inotify on the
    /// bundle directories and the approvals file, bursts debounced, an overflow answered by a
    /// full rescan. Extensions outside the host's bundle never appear for a point whose scope is
    /// `.application`.
    ///
    /// As in ExtensionFoundation, the monitor is `Observable`: ``identities``, ``state`` and
    /// ``points`` report their changes to `withObservationTracking` and `Observations`
    /// (`Observations { monitor.identities }`), whichever thread the change comes from. An
    /// observer woken by a change already reads the new value.
    public final class Monitor: Sendable, Observable {
        /// What the monitor sees.
        public struct State: Sendable, Equatable {
            /// Installed, approved and enabled: these may be launched.
            public var identities: [AppExtensionIdentity] = []
            /// Approved (or bundled) but disabled by the owner.
            public var disabledCount = 0
            /// Installed outside the host's bundle and not approved for their current contents.
            public var unapprovedCount = 0
            /// Forbidden by the administrator (or in the user's own file): never offered.
            public var forbiddenCount = 0
            /// Why each installed extension of the points that is not offered is not (unapproved,
            /// forbidden or disabled): identifier → reason, e.g. "version 1.0 is lower than the
            /// approved 1.2 (a rollback)".
            public var reasons: [String: String] = [:]
            /// Bundles that are broken, inconsistent or unsafe, with the file, line and reason.
            public var invalid: [CatalogProblem] = []
            /// An approvals file (the user's or the administrator's) could not be read: nothing is
            /// launched until it is fixed.
            public var approvalsProblem: CatalogProblem?
        }

        public let host: AppExtensionHost
        /// How long a burst of file-system events is collected before one rescan.
        public static let debounce = Duration.milliseconds(10)

        private struct Core {
            var points: [AppExtensionPoint]
            var state = State()
            var subscribers: [UUID: AsyncStream<State>.Continuation] = [:]
            var rescanScheduled = false
            var cancelled = false
        }

        private let core: Mutex<Core>
        private let registrar = ObservationRegistrar()
        /// Held for the whole of a scan: scans run one at a time, in order.
        private let scanning = Mutex<Void>(())
        private let watcher: DirectoryWatcher
        private let rescanQueue = DispatchQueue(label: "extsandbox.monitor.rescan")
        private let stateDirectory: String
        private let stateFileName: String
        private let systemStateDirectory: String
        private let systemStateFileName: String

        /// Scans the points' extensions and starts following changes. Throws
        /// ``DiscoveryError/catalog(_:)`` when an approvals file is broken or unreadable (it names
        /// the file and line), ``DiscoveryError/watchFailed(_:)`` when the bundle directories
        /// cannot be watched (inotify, the host's event monitor).
        public init(points: [AppExtensionPoint], host: AppExtensionHost) async throws(DiscoveryError) {
            self.host = host
            core = Mutex(Core(points: points))
            stateDirectory = FilePaths.directory(of: host.locations.stateFile)
            stateFileName = FilePaths.lastComponent(host.locations.stateFile)
            systemStateDirectory = FilePaths.directory(of: host.locations.systemStateFile)
            systemStateFileName = FilePaths.lastComponent(host.locations.systemStateFile)
            do throws(SandboxError) {
                watcher = try DirectoryWatcher()
            } catch {
                throw .watchFailed(error)
            }
            // Complete now: the watcher's first event already finds this monitor. (It watches
            // nothing before the scan below adds the directories, so nothing comes earlier.)
            do throws(SandboxError) {
                try watcher.start { [weak self] events in self?.changed(events) }
            } catch {
                watcher.close()
                throw .watchFailed(error)
            }
            if let problem = rescan().approvalsProblem {
                watcher.close()
                throw .catalog(problem)
            }
        }

        /// A monitor for one point (ExtensionFoundation's `init(appExtensionPoint:)`); `host`
        /// defaults to ``AppExtensionHost/current``: this process, unless the task binds another.
        public convenience init(appExtensionPoint: AppExtensionPoint, host: AppExtensionHost = .current) async throws(DiscoveryError) {
            try await self.init(points: [appExtensionPoint], host: host)
        }

        /// A monitor for one point, as Apple's articles write it: `Monitor(someExtensionPoint)`.
        public convenience init(_ appExtensionPoint: AppExtensionPoint, host: AppExtensionHost = .current) async throws(DiscoveryError) {
            try await self.init(points: [appExtensionPoint], host: host)
        }

        deinit { cancel() }

        /// The extensions that may be launched now (observable).
        public var identities: [AppExtensionIdentity] {
            registrar.access(self, keyPath: \.identities)
            return core.withLock { $0.state.identities }
        }

        /// The launchable extensions, the disabled and unapproved counts and the invalid bundles
        /// (observable).
        public var state: State {
            registrar.access(self, keyPath: \.state)
            return core.withLock { $0.state }
        }

        /// The points this monitor follows (observable).
        public var points: [AppExtensionPoint] {
            registrar.access(self, keyPath: \.points)
            return core.withLock { $0.points }
        }

        /// The current state, then each change, until the monitor is cancelled or the consumer
        /// stops. Each access makes a new sequence.
        public var updates: AsyncStream<State> {
            let (stream, continuation) = AsyncStream.makeStream(of: State.self, bufferingPolicy: .bufferingNewest(8))
            let id = UUID()
            let current = core.withLock { core -> State? in
                guard !core.cancelled else { return nil }
                core.subscribers[id] = continuation
                return core.state
            }
            guard let current else {
                continuation.finish()
                return stream
            }
            continuation.yield(current)
            continuation.onTermination = { [weak self] _ in
                _ = self?.core.withLock { $0.subscribers.removeValue(forKey: id) }
            }
            return stream
        }

        /// Starts discovering a further point (rescans at once); a point of the same name is
        /// replaced.
        public func addPoint(_ point: AppExtensionPoint) async {
            core.withLock { core in
                core.points.removeAll { $0.name == point.name }
                core.points.append(point)
            }
            notifyObservers(of: \.points)
            rescan()
        }

        /// Stops discovering a point (rescans at once).
        public func removePoint(named name: String) async {
            core.withLock { $0.points.removeAll { $0.name == name } }
            notifyObservers(of: \.points)
            rescan()
        }

        /// ExtensionFoundation's name for ``addPoint(_:)``. Throws, as the initializer does, when
        /// the approvals file cannot be read (the point is followed all the same, and the
        /// monitor offers nothing until the file is fixed).
        public func addAppExtensionPoint(_ appExtensionPoint: AppExtensionPoint) async throws(DiscoveryError) {
            await addPoint(appExtensionPoint)
            if let problem = state.approvalsProblem { throw .catalog(problem) }
        }

        /// ExtensionFoundation's name for ``removePoint(named:)``: stops discovering the point
        /// of that name.
        public func removeAppExtensionPoint(_ appExtensionPoint: AppExtensionPoint) async throws(DiscoveryError) {
            await removePoint(named: appExtensionPoint.name)
        }

        /// Stops watching; the update sequences end.
        public func cancel() {
            let subscribers = core.withLock { core -> [AsyncStream<State>.Continuation] in
                guard !core.cancelled else { return [] }
                core.cancelled = true
                defer { core.subscribers.removeAll() }
                return Array(core.subscribers.values)
            }
            watcher.close()
            for subscriber in subscribers { subscriber.finish() }
        }

        /// Events from the watcher (on the epoll thread): schedule one rescan for a burst.
        private func changed(_ events: [DirectoryWatcher.Event]) {
            guard events.contains(where: isRelevant) else { return }
            let schedule = core.withLock { core -> Bool in
                guard !core.cancelled, !core.rescanScheduled else { return false }
                core.rescanScheduled = true
                return true
            }
            guard schedule else { return }
            // A queue of its own (an overcommitting one: it gets a thread even while the
            // concurrency pool is busy), so an update never waits behind the host's tasks.
            rescanQueue.asyncAfter(deadline: .now() + .milliseconds(Int(Self.debounce.components.attoseconds / 1_000_000_000_000_000))) { [weak self] in
                self?.rescan()
            }
        }

        /// Tells observers that `keyPath` changed. Called *after* the new value is stored (and
        /// outside the locks): the change is made on the watcher's queue, not on the observer's
        /// isolation, so an observer woken by `willSet` could otherwise read the old value and
        /// miss the change for good; and an observer that reads the monitor from its handler
        /// must not find the lock held.
        private func notifyObservers<Member>(of keyPath: KeyPath<Monitor, Member>) {
            registrar.willSet(self, keyPath: keyPath)
            registrar.didSet(self, keyPath: keyPath)
        }

        /// Whether `event` may change what a scan finds. Directories and names are compared as
        /// bytes, as the kernel names them: approvals in a directory spelled like a location (a
        /// precomposed "é" and "e" with a combining accent) are not that location's.
        func isRelevant(_ event: DirectoryWatcher.Event) -> Bool {
            if event.overflowed { return true }  // events were lost: rescan everything
            let inState = FilePaths.isSame(event.directory, stateDirectory)
            let inSystemState = FilePaths.isSame(event.directory, systemStateDirectory)
            if (inState || inSystemState) && !isLocation(event.directory) {
                return event.name.isEmpty || (inState && FilePaths.isSame(event.name, stateFileName))
                    || (inSystemState && FilePaths.isSame(event.name, systemStateFileName))
            }
            if isLocation(event.directory) {
                return FilePaths.hasSuffix(event.name, "." + ExtensionLocations.bundleExtension) || event.name.isEmpty
            }
            // An ancestor watched only while an approvals directory is missing (`/etc` for a
            // missing `/etc/extsandbox`): only the name on the way to it can bring it, and the
            // ancestor's other changes (every package upgrade, in /etc) need no scan.
            if let names = namesTowardApprovals(from: event.directory) {
                return event.name.isEmpty || names.contains { FilePaths.isSame($0, event.name) }
            }
            return true
        }

        /// The names in `directory` that lead to an approvals directory below it, when that is all
        /// `directory` is watched for: it is neither a location nor inside or above one. Cut at
        /// slash bytes: a slash with a combining mark after it is still a slash.
        private func namesTowardApprovals(from directory: String) -> [String]? {
            let names = [stateDirectory, systemStateDirectory].filter { FilePaths.isBelow($0, directory) }.compactMap { below in
                // The rest after `directory`'s bytes, which `isBelow` matched.
                FilePaths.components(String(Substring(Substring(below).utf8.dropFirst(directory.utf8.count)))).first.map(String.init)
            }
            guard !names.isEmpty else { return nil }
            let locations = host.locations.external + [host.locations.bundledDirectory].compactMap { $0 }
            if locations.contains(where: {
                FilePaths.isSame($0, directory) || FilePaths.isBelow($0, directory) || FilePaths.isBelow(directory, $0)
            }) { return nil }
            return names
        }

        private func isLocation(_ directory: String) -> Bool {
            host.locations.bundledDirectory.map { FilePaths.isSame($0, directory) } == true
                || host.locations.external.contains { FilePaths.isSame($0, directory) }
        }

        /// Scans everything again and publishes the state if it changed.
        @discardableResult
        private func rescan() -> State {
            let (state, changed, identitiesChanged) = scanning.withLock { _ -> (State, Bool, Bool) in
                let points = core.withLock { core -> [AppExtensionPoint] in
                    core.rescanScheduled = false
                    return core.points
                }
                // A list, not a set of strings: two spellings of one name are two directories.
                var watched = [stateDirectory, systemStateDirectory]
                watcher.add(stateDirectory)
                watcher.add(systemStateDirectory)
                let entries = ExtensionCatalog.scan(host.locations, bundledPoints: hostPoints(following: points)) { directory in
                    watcher.add(directory)
                    watched.append(directory)
                }
                watcher.prune(keeping: watched)
                let state = Self.evaluate(entries, points: points, host: host)
                let (subscribers, changed, identitiesChanged) = core.withLock { core -> ([AsyncStream<State>.Continuation], Bool, Bool) in
                    guard core.state != state else { return ([], false, false) }
                    let identitiesChanged = core.state.identities != state.identities
                    core.state = state
                    return (Array(core.subscribers.values), true, identitiesChanged)
                }
                for subscriber in subscribers { subscriber.yield(state) }
                return (state, changed, identitiesChanged)
            }
            // Outside the scan's lock: an observer's handler may start another scan.
            if changed { notifyObservers(of: \.state) }
            if identitiesChanged {
                // What is no longer issued may no longer launch: its pre-built sandboxes go.
                let followed = Set(core.withLock { $0.points }.map(\.name)), host = host
                Task { await WarmLaunches.shared.drain(notIn: state.identities, points: followed, host: host) }
                notifyObservers(of: \.identities)
            }
            return state
        }

        /// Every point the host defines, as far as this process can know: the points this monitor
        /// follows and those the host's declaration file declares. A bundled extension of one of
        /// them that this monitor does not follow is another monitor's (one per point is the usual
        /// pattern), not invalid; only a point the host defines nowhere makes it invalid.
        private func hostPoints(following points: [AppExtensionPoint]) -> Set<String> {
            var names = Set(points.map(\.name))
            guard host.locations.hostBundle != nil else { return names }
            names.formUnion(ExtensionCatalog.declaredPoints(
                host: host.identifier, bundle: host.locations.hostBundle, in: host.locations.pointDirectories))
            return names
        }

        /// The state for `entries` under the owner's current choices.
        static func evaluate(_ entries: [CatalogEntry], points: [AppExtensionPoint], host: AppExtensionHost) -> State {
            var state = State()
            let decisions: ExtensionDecisions
            do throws(CatalogProblem) {
                decisions = try ExtensionDecisions.load(host.locations)
            } catch {
                // Never "everything approved", nor "nothing chosen": nothing runs.
                state.approvalsProblem = error
                return state
            }
            for entry in entries {
                let bundle: ValidatedBundle
                switch entry.bundle {
                case .failure(let problem):
                    state.invalid.append(problem)
                    continue
                case .success(let valid): bundle = valid
                }
                guard let point = points.first(where: { $0.name == bundle.manifest.point }) else { continue }
                // An external extension never appears for a point limited to the host's own.
                if !entry.origin.isBundled && point.scope.restriction == .application { continue }
                let identifier = bundle.manifest.identifier
                switch decisions.evaluate(entry).status {
                case .enabled:
                    let discovered = DiscoveredExtension(bundle: bundle, origin: entry.origin, stateFile: host.locations.stateFile,
                                                         systemStateFile: host.locations.systemStateFile,
                                                         containerDirectory: host.locations.containerDirectory)
                    let identity = AppExtensionIdentity(
                        bundleIdentifier: bundle.manifest.identifier, displayName: bundle.manifest.displayName,
                        version: bundle.manifest.version, point: point, hostIdentifier: host.identifier,
                        executablePath: bundle.executablePath, arguments: [], origin: .discovered(discovered))
                    IssuedIdentities.shared.insert(identity)
                    state.identities.append(identity)
                case .disabled:
                    state.disabledCount += 1
                    state.reasons[identifier] = "the owner disabled it"
                case .unapproved(let reason):
                    state.unapprovedCount += 1
                    state.reasons[identifier] = reason
                case .forbidden(let reason):
                    state.forbiddenCount += 1
                    state.reasons[identifier] = reason
                case .invalid(let problem): state.invalid.append(problem)
                }
            }
            state.identities.sort { $0.bundleIdentifier < $1.bundleIdentifier }
            return state
        }
    }
}
