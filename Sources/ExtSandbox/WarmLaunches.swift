import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxRuntime
import SandboxSystem
import Synchronization

/// The identities a host keeps pre-built sandboxes ready for, with the shape each was prepared
/// with: what a drain ends when the identity may no longer launch or the host stops asking.
actor WarmLaunches {
    static let shared = WarmLaunches()

    private struct Kept {
        var identity: AppExtensionIdentity
        /// This preparation (a drain while it builds removes it: what it built is then ended).
        var token = UUID()
        /// What the supervisor keeps for it, once built (``Supervisor/release(_:)`` ends it,
        /// whatever its shape has become since).
        var reservation: SandboxReservation?
    }

    private var kept: [String: [Kept]] = [:]

    /// Keeps `count` pre-built sandboxes of `identity`'s shape. Returns how many are kept: 0 for
    /// a point with a container, whose launches are always cold.
    func prepare(_ identity: AppExtensionIdentity, count: Int) async throws(ExtensionError) -> Int {
        guard count >= 0 else {
            throw .launch(SandboxError(step: .configuration, errorNumber: EINVAL, detail: "a pool of \(count) pre-built sandboxes"),
                          securityLevel: identity.point.securityLevel)
        }
        guard count > 0 else {
            await drain(identity)
            return 0
        }
        // An idle pre-built sandbox would hold the container's mount while the next launch of the
        // same extension mounts (and, as root, places the image of) that container again.
        guard identity.point.container == nil && identity.point.sharedContainer == nil else {
            await drain(identity)
            return 0
        }
        let key = try ProcessReuseKey(identity: identity)
        let authorization: LaunchAuthorization
        do throws(ExtensionError) {
            authorization = try LaunchAuthorization.authorize(identity)
        } catch {
            await drain(refused: identity)
            throw error
        }
        let configuration = authorization.sandboxConfiguration(
            identity: identity, policy: key.policy, containers: ContainerGrant(), output: .null, extensionFD: nil)
        // Another shape kept for it before (a new version, another policy) is let go first.
        await drain(identity)
        // Listed while it builds, so that a drain meanwhile (a revocation) finds it.
        let entry = Kept(identity: identity)
        kept[identity.bundleIdentifier, default: []].append(entry)
        let reservation: SandboxReservation
        do throws(SandboxError) {
            reservation = try await Supervisor.shared.prepare(configuration, count: count)
        } catch {
            kept[identity.bundleIdentifier]?.removeAll { $0.token == entry.token }
            if kept[identity.bundleIdentifier]?.isEmpty == true { kept[identity.bundleIdentifier] = nil }
            throw .launch(error, securityLevel: identity.point.securityLevel)
        }
        guard let index = kept[identity.bundleIdentifier]?.firstIndex(where: { $0.token == entry.token }) else {
            await Supervisor.shared.release(reservation)  // drained while it was built
            return 0
        }
        kept[identity.bundleIdentifier]?[index].reservation = reservation
        return count
    }

    /// Ends the idle pre-built sandboxes of every identity with `identifier` and keeps none for
    /// them from now on.
    func drain(identifier: String) async {
        for entry in kept.removeValue(forKey: identifier) ?? [] { await Self.end(entry) }
    }

    /// Ends those of every identity with `refused`'s identifier in its world (the same host and,
    /// for discovered ones, the same approvals): a version of it may no longer launch there.
    /// Another host's extension that happens to share the identifier keeps its own.
    func drain(refused: AppExtensionIdentity) async {
        let entries = kept[refused.bundleIdentifier] ?? []
        let ending = entries.filter { Self.sameWorld($0.identity, refused) }
        kept[refused.bundleIdentifier] = entries.filter { !Self.sameWorld($0.identity, refused) }
        if kept[refused.bundleIdentifier]?.isEmpty == true { kept[refused.bundleIdentifier] = nil }
        for entry in ending { await Self.end(entry) }
    }

    /// Whether two identities are decided by the same host and approvals (files by bytes: two
    /// spellings of a name are two files).
    private static func sameWorld(_ one: AppExtensionIdentity, _ other: AppExtensionIdentity) -> Bool {
        guard one.hostIdentifier == other.hostIdentifier else { return false }
        switch (one.origin, other.origin) {
        case (.discovered(let first), .discovered(let second)): return FilePaths.isSame(first.stateFile, second.stateFile)
        case (.discovered, _), (_, .discovered): return false
        default: return true
        }
    }

    /// Ends those of discovered identities that a monitor of `host` following `points` no longer
    /// issues (`launchable`): disabled, revoked, removed or changed since.
    func drain(notIn launchable: [AppExtensionIdentity], points: Set<String>, host: AppExtensionHost) async {
        for entries in kept.values {
            for entry in entries where !launchable.contains(entry.identity) && points.contains(entry.identity.point.name) {
                // Only what this monitor's host and approvals decide (another monitor's world is not this one's).
                guard case .discovered(let discovered) = entry.identity.origin, entry.identity.hostIdentifier == host.identifier,
                      FilePaths.isSame(discovered.stateFile, host.locations.stateFile) else { continue }
                await drain(entry.identity)
            }
        }
    }

    /// Ends every identity's.
    func drainAll() async {
        for identifier in Array(kept.keys) { await drain(identifier: identifier) }
    }

    /// Whether `identity`'s are kept (the tests' view).
    func keeps(_ identity: AppExtensionIdentity) -> Bool {
        kept[identity.bundleIdentifier]?.contains { $0.identity == identity } == true
    }

    private func drain(_ identity: AppExtensionIdentity) async {
        let entries = kept[identity.bundleIdentifier] ?? []
        kept[identity.bundleIdentifier] = entries.filter { $0.identity != identity }
        if kept[identity.bundleIdentifier]?.isEmpty == true { kept[identity.bundleIdentifier] = nil }
        for entry in entries where entry.identity == identity { await Self.end(entry) }
    }

    /// Stops keeping `entry`'s sandboxes; its idle ones end before this returns (those of another
    /// identity of the same shape stay). One still being built is ended when its build returns.
    private static func end(_ entry: Kept) async {
        if let reservation = entry.reservation { await Supervisor.shared.release(reservation) }
    }
}

extension AppExtensionProcess {
    /// Keeps `count` pre-built sandboxes ready for `identity`, so that its next launches are
    /// warm: a launch (`AppExtensionProcess(configuration:)`, or ``makeConnection(handlers:)`` after the
    /// process ended) takes a sandbox that is built already (namespaces, ids, cgroups, the file
    /// system with the policy's binds and the bundle's resources) and hands it only the
    /// extension's sealed executable, arguments, environment and channel, and a replacement is
    /// built in the background. Each sandbox runs one launch, ever. Returns once they are built,
    /// with how many are kept; `count` 0 stops keeping them and ends the idle ones.
    ///
    /// The identity is checked as a launch checks it (installed, unchanged, approved, enabled,
    /// in scope), and every launch is checked again: a warm launch is refused exactly when a
    /// cold one would be. When the identity can no longer launch (disabled, revoked, removed or
    /// changed: a launch refused, or a ``AppExtensionPoint/Monitor`` of its point no longer
    /// issuing it), its idle sandboxes are ended, and none is kept for it until the host asks
    /// again. ``endWarmLaunches()`` ends every identity's.
    ///
    /// **Containers:** an identity whose point gives a container (``AppExtensionPoint/container``
    /// or ``AppExtensionPoint/sharedContainer``) is always launched cold, and this returns 0:
    /// an idle pre-built sandbox would hold the container's mount while the next launch of the
    /// same extension mounts it again.
    ///
    /// **Cost:** none is kept by default, since a host may have thousands of extensions. Each
    /// idle sandbox holds about 290 KiB of memory (kernel memory included:
    /// `Supervisor.shared.poolStatus`), a process and a few descriptors, and the supervisor keeps
    /// at most 64 in all (a larger `count` throws). Sandboxes are kept per *shape* (policy,
    /// binds, resources): extensions of one point with no resources share theirs. They die with
    /// the host's process.
    @discardableResult
    public static func prepareWarmLaunches(of identity: AppExtensionIdentity, count: Int) async throws(ExtensionError) -> Int {
        try LaunchAuthorization.checkProvenance(identity)
        return try await WarmLaunches.shared.prepare(identity, count: count)
    }

    /// Ends every idle pre-built sandbox kept by ``prepareWarmLaunches(of:count:)`` (their
    /// processes, descriptors and cgroups are gone when this returns), and keeps none from now
    /// on. A host that is ending, or that no longer expects launches, calls this.
    public static func endWarmLaunches() async {
        await WarmLaunches.shared.drainAll()
    }
}
