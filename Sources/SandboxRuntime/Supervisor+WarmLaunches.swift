import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem
import Synchronization

// Warm launches: the supervisor's side of its pool of pre-built sandboxes (SandboxPool.swift
// keeps them): preparing a shape, building one, launching in one, refilling and draining.
extension Supervisor {
    /// Keeps `count` pre-built sandboxes of `configuration`'s shape ready, so that launches of
    /// that shape are warm: they skip the clone, the namespaces, the id maps and the file system,
    /// and only hand the waiting sandbox their program, arguments, environment, working
    /// directory and fds. Returns once they are built, with the reservation that
    /// ``release(_:)`` ends (the first failure is thrown; nothing is kept for it then).
    ///
    /// The shape is everything in a configuration but what is per launch (``SandboxConfiguration/arguments``,
    /// ``SandboxConfiguration/environment``, ``SandboxConfiguration/workingDirectory``, the standard
    /// streams, ``SandboxConfiguration/extraFileDescriptors``, ``SandboxConfiguration/executableCopy``):
    /// the policy and its filter, the mounts (a program exec'd by path is bound in, so its path is
    /// part of the shape), the hostname, audit mode and ids. A launch with a controlling terminal
    /// is never warm.
    ///
    /// Each sandbox runs one program, ever; a launch that takes one starts building its
    /// replacement in the background, behind every launch a caller waits for. A sandbox whose
    /// bind sources changed since it was built (another file at a source's path) is discarded
    /// and the launch is cold. Callers that prepare the same shape share its sandboxes and keep
    /// the sum of their counts. The supervisor keeps at most 64 in all; each idle one holds
    /// memory (``poolStatus``), so a host sizes the pool for the launches it expects, not for
    /// every extension it has.
    @discardableResult
    public func prepare(_ configuration: SandboxConfiguration, count: Int) async throws(SandboxError) -> SandboxReservation {
        guard !configuration.controllingTerminal else {
            throw SandboxError(step: .configuration, errorNumber: EINVAL, detail: "a launch with a controlling terminal is never pre-built")
        }
        pool.setMonitor(monitor)
        let shape = try self.shape(of: configuration)
        let reservation = try pool.reserve(shape.key, configuration, count: count)
        while let next = pool.nextToBuild(only: reservation.shelf) {
            do {
                try await prebuild(onShelf: next.shelf, next.configuration, generation: next.generation)
            } catch {
                await SandboxPool.discard(pool.release(reservation))
                throw error
            }
        }
        // What a refill under way builds counts too: wait for it (not past the caller's cancellation).
        while pool.awaitsRefill(reservation.shelf), !Task.isCancelled { try? await Task.sleep(for: .milliseconds(1)) }
        return reservation
    }

    /// Keeps what `reservation` kept no longer: the idle sandboxes no other reservation of the
    /// shape needs end before this returns (their processes, fds and cgroups gone). It finds them
    /// even when the shape changed since ``prepare(_:count:)`` (a bind source replaced, a
    /// masked path that appeared). Releasing twice does nothing.
    public func release(_ reservation: SandboxReservation) async {
        await SandboxPool.discard(pool.release(reservation))
    }

    /// Ends every pre-built sandbox and keeps none from now on (every reservation is released,
    /// until the next ``prepare(_:count:)``). Returns once their processes, fds and cgroups are gone.
    public func drainPool() async {
        await SandboxPool.discard(pool.emptyAll())
    }

    /// How many pre-built sandboxes are ready or being built, and the memory the ready ones hold.
    public var poolStatus: SandboxPoolStatus {
        let (ready, building) = pool.all
        let bytes = ready.reduce(0) { $0 + Self.idleMemory(of: $1) }
        return SandboxPoolStatus(ready: ready.count, building: building, idleMemoryBytes: bytes)
    }

    private static func idleMemory(of ready: SandboxPool.Ready) -> Int {
        if let bytes = ready.cgroup?.memoryInUse { return bytes }
        guard let text = SystemFiles.text("/proc/\(ready.started.pid)/smaps_rollup") else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("Pss:") {
            return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
        }
        return 0
    }

    /// Builds one sandbox of `configuration`'s shape for shelf `shelf` and shelves it (or
    /// discards it, when the pool no longer wants it).
    private func prebuild(onShelf shelf: UInt64, _ configuration: SandboxConfiguration, generation: Int) async throws(SandboxError) {
        let shape: LaunchPlan.Shape
        let ready: SandboxPool.Ready
        do {
            shape = try self.shape(of: configuration)
            // Taken before the build: a source replaced while it is built is caught at the take.
            let sources = SandboxPool.BindSourceIdentity.of(shape.plan)
            let (result, cgroup, _) = try await build(LaunchPlan(shape: shape, configuration: configuration, stdio: nil))
            ready = SandboxPool.Ready(started: result, key: shape.key, cgroup: cgroup, bindSources: sources)
        } catch {
            _ = pool.built(nil, onShelf: shelf, as: nil, generation: generation)
            throw error
        }
        // Its death while idle (killed from outside) is the control socket's end: dropped, refilled.
        do throws(SandboxError) {
            guard let control = ready.control else {
                throw SandboxError(step: .handshake, errorNumber: EBADF, detail: "the pre-built sandbox returned no control socket")
            }
            try ready.watch.withLock { (token: inout UInt64?) throws(SandboxError) in
                do throws(EventMonitor.Failure) {
                    token = try monitor.add(fd: control) { [self] _ in idleSandboxEnded(ready) }
                } catch {
                    throw SandboxError(error)
                }
            }
        } catch {
            _ = pool.built(nil, onShelf: shelf, as: nil, generation: generation)
            await SandboxPool.discard([ready])
            throw error
        }
        if !pool.built(ready, onShelf: shelf, as: shape.key, generation: generation) {
            let token = ready.watch.withLock { $0 }
            if let token, let control = ready.control { monitor.remove(fd: control, token: token) }
            await SandboxPool.discard([ready])
        }
    }

    /// On the monitor thread: an idle sandbox's control socket became readable, which only its
    /// end (or a report of a failure) makes it: drop it and build another.
    private func idleSandboxEnded(_ ready: SandboxPool.Ready) {
        guard pool.claim(ready) else { return }  // taken meanwhile: the taker stops the watch
        let token = ready.watch.withLock { token in
            defer { token = nil }
            return token
        }
        if let token, let control = ready.control { monitor.remove(fd: control, token: token) }
        // Discarded before the refill starts, so that the two never compete for the CPU.
        let body: @Sendable () -> Void = { [self] in
            ready.discard()
            refill()
        }
        do { try SupervisorThread.start(name: "xsb-pool-drop", stackSize: 256 << 10, body) } catch { Task.detached(operation: body) }
    }

    /// Builds what the pool lacks, one sandbox at a time, in the background, each only while
    /// no launch a caller waits for is queued on the spawner thread or under way in a
    /// pre-built sandbox, and no warm launch's program is in its first moments (the refill
    /// then stops, and that program's settling starts it again).
    func refill() {
        guard pool.startRefill() else { return }
        Task.detached(priority: .background) { [self] in
            while true {
                while spawner.isLaunching || pool.isLaunching { try? await Task.sleep(for: .milliseconds(1)) }
                if pool.stopRefillingWhileProgramsStart() { return }
                guard let next = pool.nextToBuild() else { return }
                do {
                    try await prebuild(onShelf: next.shelf, next.configuration, generation: next.generation)
                } catch {
                    // Tried again at the next take, not in a loop here.
                    pool.stopRefilling()
                    return
                }
            }
        }
    }

    /// Holds the refill back while `process`'s program starts (``SandboxPool/programStarted(_:)``):
    /// until it ends or ``SandboxPool/startingMilliseconds`` have passed, whichever comes first.
    private func refillOnceSettled(_ process: SandboxedProcess) {
        let program = ObjectIdentifier(process)
        // The timer, and whether the program has settled: either way once, and the timer's
        // descriptor goes with whichever comes first (or at once, if it settled before the
        // timer was kept here).
        let watch = Mutex<(timer: EventMonitor.Timer?, settled: Bool)>((nil, false))
        let settled: @Sendable () -> Void = { [pool, self] in
            let first = watch.withLock { watch -> (Bool, EventMonitor.Timer?) in
                defer { watch = (nil, true) }
                return (!watch.settled, watch.timer)
            }
            // Cancelled outside the lock: a cancel waits for a running handler, which may be
            // this very closure waiting for the lock on the monitor thread.
            first.1?.cancel()
            guard first.0 else { return }
            pool.programSettled(program)
            refill()
        }
        pool.programStarted(program)
        do throws(EventMonitor.Failure) {
            let armed = try monitor.addTimer(milliseconds: pool.startingMilliseconds.load(ordering: .relaxed), handler: settled)
            let late = watch.withLock { watch -> Bool in
                if !watch.settled { watch.timer = armed }
                return watch.settled
            }
            if late { armed.cancel() }
        } catch {
            return settled()  // no timer to spare (the host at its fd limit): refill at once
        }
        process.afterEnded { _ in settled() }
    }

    /// A warm launch in the pre-built sandbox `ready` (the caller took it from the pool). Nil
    /// when it cannot be used (it ended while idle, or a bind source changed since it was
    /// built): it is discarded and the caller launches cold. Its replacement is built once the
    /// launch has its answer, not beside it.
    func launch(
        _ configuration: SandboxConfiguration, stdio: (Int32, Int32, Int32), executable: String, in ready: SandboxPool.Ready
    ) async throws(SandboxError) -> SandboxedProcess? {
        defer {
            pool.launchEnded()
            refill()
        }
        var poller = pollfd(fd: ready.started.control_fd, events: 0, revents: 0)
        let ended = poll(&poller, 1, 0) == 1 && poller.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0
        guard !ended, ready.bindSources.allSatisfy(\.isCurrent) else {
            SandboxPool.discardInBackground([ready])
            return nil
        }
        let part = LaunchPlan.launchPart(configuration, executable: executable, stdio: stdio)
        var started = ready.started
        let control = ready.handOver()
        let sent = part.withConfiguration { xsb_prebuilt_launch(control, &$0, &started) }
        withExtendedLifetime(configuration.executableCopy) {}
        if sent != 0 { xsb_spawn_abandon(&started, started.failed_step, started.error_number, "handing the launch to the pre-built sandbox") }
        let watched = ReadyWatch(monitor: monitor, cgroup: ready.cgroup)
        let result = sent == 0
            ? await LaunchSetupWait.wait(for: started, on: monitor, timeoutMilliseconds: setupTimeoutMilliseconds, whenReady: watched.ready)
            : started
        let process: SandboxedProcess
        do {
            process = try running(try Self.succeeded(result), cgroup: ready.cgroup, limits: configuration.policy.limits, watched: watched)
        } catch {
            ready.cgroup?.remove()
            throw error
        }
        refillOnceSettled(process)
        return process
    }
}
