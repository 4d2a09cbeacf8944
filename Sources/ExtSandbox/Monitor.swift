import Dispatch
import ExtensionCatalog
import FoundationEssentials
import Glibc
import SandboxPolicy
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
    public final class Monitor: Sendable {
        /// What the monitor sees.
        public struct State: Sendable, Equatable {
            /// Installed, approved and enabled: these may be launched.
            public var identities: [AppExtensionIdentity] = []
            /// Approved (or bundled) but disabled by the owner.
            public var disabledCount = 0
            /// Installed outside the host's bundle and not approved for their current contents.
            public var unapprovedCount = 0
            /// Bundles that are broken, inconsistent or unsafe, with the file, line and reason.
            public var invalid: [CatalogProblem] = []
            /// The approvals file could not be read: nothing is launched until it is fixed.
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
        /// Held for the whole of a scan: scans run one at a time, in order.
        private let scanning = Mutex<Void>(())
        private let watcher: DirectoryWatcher
        private let rescanQueue = DispatchQueue(label: "extsandbox.monitor.rescan")
        private let stateDirectory: String
        private let stateFileName: String

        /// Scans the points' extensions (throws when the approvals file is broken or unreadable)
        /// and starts following changes.
        public init(points: [AppExtensionPoint], host: AppExtensionHost) async throws {
            self.host = host
            core = Mutex(Core(points: points))
            stateDirectory = FilePaths.directory(of: host.locations.stateFile)
            stateFileName = FilePaths.lastComponent(host.locations.stateFile)
            let relay = WeakMonitor()
            watcher = try DirectoryWatcher { events in relay.monitor?.changed(events) }
            relay.monitor = self
            if let problem = rescan().approvalsProblem {
                watcher.close()
                throw DiscoveryError.catalog(problem)
            }
        }

        /// A monitor for one point.
        public convenience init(appExtensionPoint: AppExtensionPoint, host: AppExtensionHost) async throws {
            try await self.init(points: [appExtensionPoint], host: host)
        }

        deinit { cancel() }

        /// The extensions that may be launched now.
        public var identities: [AppExtensionIdentity] { core.withLock { $0.state.identities } }
        public var state: State { core.withLock { $0.state } }
        public var points: [AppExtensionPoint] { core.withLock { $0.points } }

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

        /// Starts discovering a further point (rescans at once).
        public func addPoint(_ point: AppExtensionPoint) async {
            core.withLock { core in
                core.points.removeAll { $0.name == point.name }
                core.points.append(point)
            }
            rescan()
        }

        /// Stops discovering a point (rescans at once).
        public func removePoint(named name: String) async {
            core.withLock { $0.points.removeAll { $0.name == name } }
            rescan()
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

        private func isRelevant(_ event: DirectoryWatcher.Event) -> Bool {
            if event.overflowed { return true }  // events were lost: rescan everything
            if event.directory == stateDirectory && !isLocation(event.directory) {
                return event.name == stateFileName || event.name.isEmpty
            }
            if isLocation(event.directory) {
                return event.name.hasSuffix("." + ExtensionLocations.bundleExtension) || event.name.isEmpty
            }
            return true
        }

        private func isLocation(_ directory: String) -> Bool {
            directory == host.locations.bundledDirectory || host.locations.external.contains(directory)
        }

        /// Scans everything again and publishes the state if it changed.
        @discardableResult
        private func rescan() -> State {
            scanning.withLock { _ in
                let points = core.withLock { core -> [AppExtensionPoint] in
                    core.rescanScheduled = false
                    return core.points
                }
                var watched: Set<String> = [stateDirectory]
                watcher.add(stateDirectory)
                let entries = ExtensionCatalog.scan(host.locations, bundledPoints: hostPoints(following: points)) { directory in
                    watcher.add(directory)
                    watched.insert(directory)
                }
                watcher.prune(keeping: watched)
                let state = Self.evaluate(entries, points: points, host: host)
                let subscribers = core.withLock { core -> [AsyncStream<State>.Continuation] in
                    guard core.state != state || core.subscribers.isEmpty else { return [] }
                    let changed = core.state != state
                    core.state = state
                    return changed ? Array(core.subscribers.values) : []
                }
                for subscriber in subscribers { subscriber.yield(state) }
                return state
            }
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
            let approvals: ApprovalState
            do throws(CatalogProblem) {
                approvals = try ApprovalStore(path: host.locations.stateFile).load()
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
                switch ExtensionCatalog.status(of: entry, state: approvals) {
                case .enabled:
                    let discovered = DiscoveredExtension(bundle: bundle, origin: entry.origin, stateFile: host.locations.stateFile)
                    let identity = AppExtensionIdentity(
                        bundleIdentifier: bundle.manifest.identifier, displayName: bundle.manifest.displayName,
                        version: bundle.manifest.version, point: point, hostIdentifier: host.identifier,
                        executablePath: bundle.executablePath, arguments: [], origin: .discovered(discovered))
                    IssuedIdentities.shared.insert(identity)
                    state.identities.append(identity)
                case .disabled: state.disabledCount += 1
                case .unapproved: state.unapprovedCount += 1
                case .invalid(let problem): state.invalid.append(problem)
                }
            }
            state.identities.sort { $0.bundleIdentifier < $1.bundleIdentifier }
            return state
        }
    }
}

/// Lets the watcher reach its monitor without keeping it alive. The watcher's thread may read it
/// while the monitor's initializer sets it (events that come first are covered by the
/// initializer's own scan), so the reference is behind a lock.
private final class WeakMonitor: Sendable {
    private struct Reference { weak var monitor: AppExtensionPoint.Monitor? }
    private let reference = Mutex(Reference())

    var monitor: AppExtensionPoint.Monitor? {
        get { reference.withLock { $0.monitor } }
        set { reference.withLock { $0.monitor = newValue } }
    }
}
