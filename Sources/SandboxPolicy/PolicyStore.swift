import SandboxSystem
import Synchronization

/// A resolved policy, its seccomp filter (supervised mode), and what decided them.
public struct CompiledPolicy: Sendable, Equatable {
    public var policy: Policy
    /// What outside the policy's text decided it: the store trusts `policy` and `filter` again
    /// only while ``PolicyResolution/isCurrent(searchPath:)`` holds.
    public var resolution: PolicyResolution
    public var filter: CompiledSeccompFilter

    public init(policy: Policy, resolution: PolicyResolution, filter: CompiledSeccompFilter) {
        self.policy = policy
        self.resolution = resolution
        self.filter = filter
    }
}

/// Where a ``PolicyStore`` keeps compiled policies beyond the process (the CLI's per-user cache,
/// `PolicyDiskCache` in PolicyTools). It answers only with an entry it has checked is still
/// current along `searchPath`; storing is best effort.
public protocol PolicyDiskLayer: Sendable {
    /// What loading `file` along `searchPath` gives, with its filter, if an entry recorded it
    /// and nothing that decided it has changed since.
    func lookup(file: String, searchPath: PolicySearchPath) -> CompiledPolicy?
    /// Records a loaded policy and its filter for later processes.
    func store(_ compiled: CompiledPolicy, searchPath: PolicySearchPath)
}

/// The one place policies are loaded, remembered and compiled: "the resolved policy (and its
/// filter) for this name or path along this search path", for the CLI, the host API and the
/// supervisor alike.
///
/// - In memory, each file loaded (per search path) is remembered with its ``PolicyResolution``
///   and served again only while that is current: every file it was made of still has the same
///   bytes, every name still finds the same file, every path the same canonical path. So an
///   edited policy takes effect at the next request, and an unchanged one is not parsed again.
/// - Equal policies are one value: a policy loaded equal to one the store holds is replaced by
///   that one, whose storage they then share (a host keeps one per running extension).
/// - Each distinct seccomp policy is compiled once (``filter(for:)``), whoever asks.
/// - An optional ``PolicyDiskLayer`` lets a short-lived process (`extsandbox exec`) skip loading
///   and compiling altogether when an earlier run stored the same policy.
///
/// It lives in SandboxPolicy, the lowest module that knows policies, so that the CLI, ExtSandbox
/// and SandboxRuntime all reach it; the on-disk layer's format and trust rules live in PolicyTools
/// and plug in through ``PolicyDiskLayer``, so that hosts link none of it.
public final class PolicyStore: Sendable {
    /// The process's store (in memory only): the host API's and the supervisor's.
    public static let shared = PolicyStore()

    /// The most files and the most filters remembered; the least recently used goes first.
    public let capacity: Int
    private let diskLayer: (any PolicyDiskLayer)?

    private struct Remembered {
        var file: String
        var directories: [String]
        var policy: Policy
        var resolution: PolicyResolution
    }

    /// Most recently used first.
    private let remembered = Mutex<[Remembered]>([])
    /// Most recently used first. Compilation happens under this lock, so that two launches of a
    /// new policy compile it once.
    private let filters = Mutex<[(seccomp: SeccompPolicy, filter: CompiledSeccompFilter)]>([])
    private let loads = Atomic<Int>(0)
    private let compilations = Atomic<Int>(0)

    /// A store in memory, over `diskLayer` when one is given.
    public init(diskLayer: (any PolicyDiskLayer)? = nil, capacity: Int = 16) {
        self.diskLayer = diskLayer
        self.capacity = max(1, capacity)
    }

    /// The policy `nameOrPath` names along `searchPath`, as ``PolicyLoader/load(nameOrPath:searchPath:)``
    /// gives it (a relative path is taken from the current directory), loaded again only when
    /// something it was made of changed.
    public func policy(nameOrPath: String, searchPath: PolicySearchPath) throws(PolicyError) -> Policy {
        try resolve(nameOrPath, searchPath, compile: false).policy
    }

    /// ``policy(nameOrPath:searchPath:)`` and its filter (``filter(for:)``); with a disk layer,
    /// from there when an earlier process stored it, and stored there otherwise.
    public func compiled(
        nameOrPath: String, searchPath: PolicySearchPath
    ) throws(PolicyError) -> (policy: Policy, filter: CompiledSeccompFilter) {
        let (policy, filter) = try resolve(nameOrPath, searchPath, compile: true)
        guard let filter else { return (policy, try self.filter(for: policy)) }
        return (policy, filter)
    }

    /// The supervised-mode filter of `policy`, compiled once per distinct seccomp policy.
    public func filter(for policy: Policy) throws(PolicyError) -> CompiledSeccompFilter {
        try filters.withLock { (filters) throws(PolicyError) -> CompiledSeccompFilter in
            if let index = filters.firstIndex(where: { $0.seccomp == policy.seccomp }) {
                let found = filters.remove(at: index)
                filters.insert(found, at: 0)
                return found.filter
            }
            let filter = try policy.compileSeccompFilter(mode: .supervised)
            compilations.add(1, ordering: .relaxed)
            filters.insert((policy.seccomp, filter), at: 0)
            if filters.count > capacity { filters.removeLast() }
            return filter
        }
    }

    /// How many times this store parsed policy files and compiled filters (for tests).
    package var counts: (loads: Int, compilations: Int) {
        (loads.load(ordering: .relaxed), compilations.load(ordering: .relaxed))
    }

    private func resolve(
        _ nameOrPath: String, _ searchPath: PolicySearchPath, compile: Bool
    ) throws(PolicyError) -> (policy: Policy, filter: CompiledSeccompFilter?) {
        let file = PolicyLoader.isPath(nameOrPath)
            ? (FilePaths.isAbsolute(nameOrPath) ? nameOrPath : FilePaths.join(SystemFiles.currentDirectory() ?? "/", nameOrPath))
            : try searchPath.locate(name: nameOrPath)
        if let policy = current(file: file, searchPath: searchPath) { return (policy, nil) }
        if let diskLayer, compile, let hit = diskLayer.lookup(file: file, searchPath: searchPath) {
            let policy = remember(hit.policy, file: file, searchPath: searchPath, resolution: hit.resolution)
            remember(hit.filter, for: policy)
            return (policy, hit.filter)
        }
        let (loaded, resolution) = try PolicyLoader.loadRecordingResolution(file: file, searchPath: searchPath)
        loads.add(1, ordering: .relaxed)
        let policy = remember(loaded, file: file, searchPath: searchPath, resolution: resolution)
        guard compile, let diskLayer else { return (policy, nil) }
        let filter = try filter(for: policy)
        diskLayer.store(CompiledPolicy(policy: policy, resolution: resolution, filter: filter), searchPath: searchPath)
        return (policy, filter)
    }

    /// The remembered policy of `file` along `searchPath` if nothing it was made of changed
    /// (checked outside the lock: it reads the files). A stale one stays until the new load
    /// replaces it: running processes may still hold its policy, which an equal load then shares.
    private func current(file: String, searchPath: PolicySearchPath) -> Policy? {
        let matches = { (entry: Remembered) in FilePaths.isSame(entry.file, file) && FilePaths.areSame(entry.directories, searchPath.directories) }
        guard let entry = remembered.withLock({ $0.first(where: matches) }),
              entry.resolution.isCurrent(searchPath: searchPath)
        else { return nil }
        remembered.withLock { remembered in
            guard let index = remembered.firstIndex(where: { matches($0) && $0.resolution == entry.resolution }) else { return }
            remembered.insert(remembered.remove(at: index), at: 0)
        }
        return entry.policy
    }

    /// Remembers `policy` as what `file` gives along `searchPath`, and returns the equal policy
    /// the store already holds (whose storage it then shares), else `policy` itself.
    private func remember(_ policy: Policy, file: String, searchPath: PolicySearchPath, resolution: PolicyResolution) -> Policy {
        remembered.withLock { remembered in
            let shared = remembered.first(where: { $0.policy == policy })?.policy ?? policy
            remembered.removeAll { FilePaths.isSame($0.file, file) && FilePaths.areSame($0.directories, searchPath.directories) }
            remembered.insert(
                Remembered(file: file, directories: searchPath.directories, policy: shared, resolution: resolution), at: 0)
            if remembered.count > capacity { remembered.removeLast() }
            return shared
        }
    }

    /// Keeps a filter compiled elsewhere (by an earlier process, read from the disk layer).
    private func remember(_ filter: CompiledSeccompFilter, for policy: Policy) {
        filters.withLock { filters in
            guard !filters.contains(where: { $0.seccomp == policy.seccomp }) else { return }
            filters.insert((policy.seccomp, filter), at: 0)
            if filters.count > capacity { filters.removeLast() }
        }
    }
}
