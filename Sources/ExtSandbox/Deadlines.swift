import Synchronization

/// Coarse deadlines (handshakes and the like) checked by one sleeping task for all of them,
/// instead of a task and a timer per connection: a connection's set-up is a few round trips,
/// and a task of its own cost about a fifth of it.
final class Deadlines: Sendable {
    static let shared = Deadlines()

    private struct State {
        var entries: [UInt64: (due: ContinuousClock.Instant, expire: @Sendable () -> Void)] = [:]
        var nextID: UInt64 = 1
        var sweeping = false
    }

    private let state = Mutex(State())
    /// How late an expiry may run.
    private let granularity: Duration = .milliseconds(50)

    /// Runs `expire` once `delay` has passed, unless ``cancel(_:)`` comes first.
    func add(after delay: Duration, _ expire: @escaping @Sendable () -> Void) -> UInt64 {
        let (id, startSweeper) = state.withLock { state -> (UInt64, Bool) in
            let id = state.nextID
            state.nextID += 1
            state.entries[id] = (ContinuousClock.now + delay, expire)
            defer { state.sweeping = true }
            return (id, !state.sweeping)
        }
        if startSweeper {
            Task.detached { [self] in await self.sweep() }
        }
        return id
    }

    func cancel(_ id: UInt64) {
        _ = state.withLock { $0.entries.removeValue(forKey: id) }
    }

    private func sweep() async {
        while true {
            try? await Task.sleep(for: granularity)
            let now = ContinuousClock.now
            let due = state.withLock { state -> [@Sendable () -> Void]? in
                if state.entries.isEmpty {
                    state.sweeping = false
                    return nil
                }
                let expired = state.entries.filter { $0.value.due <= now }
                for id in expired.keys { state.entries[id] = nil }
                return expired.values.map(\.expire)
            }
            guard let due else { return }
            for expire in due { expire() }
        }
    }
}
