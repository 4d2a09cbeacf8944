import Dispatch
import ExtSandboxActors
import ExtSandboxWire
import Glibc
import SandboxSystem
import Synchronization

/// The extension side of the wire protocol: the control socket on fd 3, READY, CONNECT, and
/// one reader thread per connection (blocking reads stay off the concurrency pool), with each
/// request answered from a task of its own.
///
/// Threads take turns at the control socket (leader and followers): the one that reads a CONNECT
/// answers the HELLO and serves that connection itself, so no thread has to be woken before the
/// connection's first request can be read. It keeps the control socket while its connection is
/// idle, and hands it to a waiting thread only when the next CONNECT arrives (or its connection
/// turns busy); when its connection ends first it simply goes on leading. A short connection
/// thus wakes no second thread at all: each wake-up on the host's critical path costs a round
/// trip's worth on a small VM.
final class ExtensionRuntime<Extension: AppExtension>: Sendable {
    private let app: Extension
    /// Threads for the control socket and the connections, started ahead of time and each kept
    /// for the next turn when its connection ends: creating a thread while the host waits would
    /// be a good part of a connection's cost.
    private let threads = ConnectionThreads()

    init(extension app: Extension) {
        self.app = app
    }

    @MainActor func run() async -> Never {
        let control = ControlSocket(descriptor: ExtSandboxWire.controlSocketDescriptor)
        // The host says who the extension is launched as (docs/wire-protocol.md §7); READY must
        // carry that identifier, or the host refuses the launch.
        let identifier = getenv("EXTSANDBOX_EXTENSION_IDENTIFIER").map { String(cString: $0) }
            ?? CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "") } ?? "extension"
        do {
            try control.socket.withLock { try $0.send(.ready(identifier: identifier)) }
        } catch {
            report("extension: cannot reach the host on fd 3: \(error)")
            exit(70)
        }
        // Sandboxes bound address space (RLIMIT_AS), and glibc reserves 64 MiB of it for each
        // malloc arena it adds for a busy thread: a few connections at once used to exhaust the
        // limit until a thread could not start. Two arenas serve the connections' threads.
        tuneMalloc(arenas: 2)
        // One thread to read the control socket, one waiting to take over from it.
        threads.prestart(2)
        threads.run { [self] in self.lead(control) }
        // The threads end the process (end of stream or GOODBYE on the control socket).
        await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
        exit(0)
    }

    /// Reads the control socket until a CONNECT, which this thread then serves. The control socket
    /// is used by one thread at a time: handed over through `threads`.
    private func lead(_ control: ControlSocket) {
        // The host hands over each new connection as a CONNECT with its socket.
        while let frame = control.socket.withLock({ try? $0.receive() }) {
            if frame.kind == .connect, frame.fds.count == 1, let descriptor = frame.fds.first {
                // The host writes its HELLO before it hands the socket over, so the answer usually
                // goes out from here at once; a HELLO still to come is waited for in `serve`.
                // The receiving direction is this thread's alone; the sending one is shared.
                let connection = ConnectionWriter(descriptor: descriptor)
                // A call's large byte-array argument is read into an array of its own, which the
                // method then gets as it is.
                let receiver = FrameReceiver(descriptor: descriptor) { kind, payloadCount, prefix in
                    kind == .request ? CallEnvelope.trailingByteCount(payloadCount: payloadCount, prefix: prefix) : 0
                }
                var greeted = false
                if case .frame(let first)? = try? receiver.receiveNext(wait: false) {
                    guard answer(hello: first, connection: connection) else {
                        connection.close(receiver)
                        continue
                    }
                    greeted = true
                }
                let stillLeading = serve(connection, receiver: receiver, greeted: greeted, control: control) { [self] in
                    threads.run { [self] in self.lead(control) }
                }
                if !stillLeading { return }  // another thread has the control socket
                continue
            } else if frame.kind == .goodbye {
                // The host asks the extension to end (docs/wire-protocol.md).
                control.socket.withLock { _ = try? $0.send(.goodbye) }
                exit(0)
            } else {
                frame.closeFDs()
            }
        }
        exit(0)  // end of stream: the host is gone
    }

    /// Answers the host's HELLO (`first`): HELLO if the extension accepts the connection, else
    /// ERROR (the caller closes).
    private func answer(hello first: Frame, connection: ConnectionWriter) -> Bool {
        guard first.kind == .hello, let hello = try? first.hello() else {
            first.closeFDs()
            return false
        }
        do {
            try hello.checkVersion()
        } catch {
            connection.send(.error(id: 0, code: .protocolError, message: "\(error)"))
            return false
        }
        guard app.accept(ConnectionRequest(hostName: hello.name)) else {
            connection.send(.error(id: 0, code: .rejected, message: "the extension rejected the connection"))
            return false
        }
        connection.setPeerMaximumFrameSize(hello.maximumFrameSize)
        connection.send(.hello(Hello(name: CommandLine.arguments.first)))
        return true
    }

    /// One connection, on a thread of its own (which alone reads it, through `receiver`): the
    /// handshake unless done, then requests until GOODBYE or EOF. While this thread holds the
    /// control socket (`control`), it waits for either socket and runs `handOver` (another thread
    /// takes the control socket) once a CONNECT waits there or its own connection is busy with
    /// work in flight. Returns whether it still holds the control socket when the connection has
    /// ended.
    private func serve(_ connection: ConnectionWriter, receiver socket: FrameReceiver, greeted: Bool, control: ControlSocket,
                       handOver: @escaping @Sendable () -> Void) -> Bool {
        var handOver: (@Sendable () -> Void)? = handOver
        let host = HostConnection(writer: connection)
        defer {
            // What still runs continues on the global executor: cancelled, its answer dropped.
            for task in connection.tasks.withLock({ Array($0.values) }) { task.cancel() }
            connection.close(socket)
            host.closed()
        }
        if !greeted {
            // The HELLO may take a while: no CONNECT waits for this one meanwhile.
            handOver?()
            handOver = nil
            guard let first = try? socket.receive(), answer(hello: first, connection: connection) else { return false }
        }
        host.export(app.exportedObject(host.actorSystem))
        app.connected(host)

        // Requests run on this thread: it is their tasks' preferred executor, so a handler that
        // does not suspend answers without waking any other thread (a thread hop per request
        // costs more than the whole round trip of the socket). A handler resumed from another
        // thread (after a sleep, say) continues on the global executor.
        // The socket stays blocking: with nothing to run, the thread waits in `recvmsg` itself
        // (one system call per request), or in `poll` on both sockets while it holds the control
        // socket; with jobs queued it only takes what is there.
        let executor = ReaderExecutor()
        var open = true
        // A host asks its first request right after the handshake, as a rule: look for it
        // without sleeping first (see `spinUntilReadable`), and for a CONNECT too while this
        // thread holds the control socket.
        if handOver == nil || !control.socket.withLock({ $0.hasBufferedInput }) {
            spinUntilReadable(socket, or: handOver == nil ? nil : control.descriptor.rawValue, forNanoseconds: firstRequestSpinNanoseconds)
        }
        /// A CONNECT (or GOODBYE, or EOF) waits on the control socket, or `poll` failed.
        func controlNeedsLeader(waitingForConnection: Bool) -> Bool {
            if control.socket.withLock({ $0.hasBufferedInput }) { return true }
            // (poll skips a negative number: a detached receiver, which this loop never has.)
            var fds = [pollfd(fd: socket.descriptor?.rawValue ?? -1, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: control.descriptor.rawValue, events: Int16(POLLIN), revents: 0)]
            let n = fds.withUnsafeMutableBufferPointer { both in
                retryingInterrupts { waitingForConnection ? poll(both.baseAddress, 2, -1) : poll(both.baseAddress! + 1, 1, 0) }
            }
            if n < 0 { return true }  // let another thread deal with it; never spin here
            return fds[1].revents != 0
        }
        while open {
            let result: FrameSocket.ReceiveResult
            let wait = !executor.hasPendingJobs && handOver == nil
            if wait { waitUntilReadable(socket) }
            do { result = try socket.receiveNext(wait: wait) } catch { break }
            switch result {
            case .frame(let frame):
                open = dispatch(frame, connection: connection, host: host, executor: executor)
            case .wouldBlock:
                if executor.hasPendingJobs {
                    let started = monotonicNanoseconds()
                    executor.runPending()
                    // Answered what was there. A busy connection (work still in flight, or
                    // handlers that took a while) lets another thread take the control socket:
                    // a CONNECT then waits for no handler of ours.
                    if let next = handOver {
                        let busy = !connection.tasks.withLock(\.isEmpty) || monotonicNanoseconds() - started > busyBatchNanoseconds
                        // Not busy: wait for the next request or a CONNECT in one `poll`.
                        if busy || controlNeedsLeader(waitingForConnection: !executor.hasPendingJobs) {
                            handOver = nil
                            next()
                        }
                    }
                } else if let next = handOver {
                    // Idle, holding the control socket: wait for whichever speaks first.
                    if controlNeedsLeader(waitingForConnection: true) {
                        handOver = nil
                        next()
                    }
                }
            case .closed:
                open = false
            }
        }
        executor.retire()
        return handOver != nil
    }

    /// Blocks until `socket` has bytes for this side (or hung up) in `poll` rather than in
    /// `recvmsg`. A thread blocked in an AF_UNIX `recvmsg` is also woken, for nothing, whenever
    /// the peer reads what this side sent (the kernel wakes the socket's waiters when its sent
    /// bytes are consumed, and only `poll`-type waits filter that wake by event): each reply the
    /// host read would wake this thread again, across CPUs a hypervisor trip for both sides.
    private func waitUntilReadable(_ socket: FrameReceiver) {
        guard !socket.hasBufferedInput, let descriptor = socket.descriptor?.rawValue else { return }
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        // A failed poll leaves the waiting to the blocking read.
        _ = retryingInterrupts { poll(&entry, 1, -1) }
    }

    /// Looks for bytes on `socket` (or on `other`) for up to `budget` nanoseconds without
    /// sleeping (polls that do not block, the CPU yielded between them). A sleeping thread woken
    /// from another CPU costs both sides a trip through the hypervisor on a VM whose idle CPUs
    /// halt; a thread still looking needs no wake-up at all. Spent once per connection, so an
    /// idle extension costs nothing.
    private func spinUntilReadable(_ socket: FrameReceiver, or other: Int32?, forNanoseconds budget: UInt64) {
        guard !socket.hasBufferedInput, let descriptor = socket.descriptor?.rawValue else { return }
        let deadline = monotonicNanoseconds() + budget
        // (poll skips a negative descriptor.)
        var entries = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0), pollfd(fd: other ?? -1, events: Int16(POLLIN), revents: 0)]
        while true {
            let ready = entries.withUnsafeMutableBufferPointer { poll($0.baseAddress, 2, 0) }
            if ready != 0 || monotonicNanoseconds() >= deadline { return }
            sched_yield()
        }
    }

    /// Handles one frame of an accepted connection; false ends the connection.
    private func dispatch(_ frame: Frame, connection: ConnectionWriter, host: HostConnection, executor: ReaderExecutor) -> Bool {
        let send = connection.send
        switch frame.kind {
        case .request:
            let id = frame.id, app = self.app
            let message = Message(frame.payload, followedBy: frame.payloadTail, fileDescriptors: frame.fds)
            let task = Task(executorPreference: executor) {
                let answer: Frame
                do {
                    let reply = try await HostConnection.$current.withValue(host) { try await app.handle(request: message) }
                    answer = .reply(id: id, payload: reply.payload, fds: reply.fileDescriptors)
                } catch let failure as ExtensionFailure {
                    answer = .error(id: id, code: ErrorCode(rawValue: failure.code), message: failure.message)
                } catch is CancellationError {
                    answer = .error(id: id, code: .cancelled, message: "cancelled")
                } catch {
                    answer = .error(id: id, code: .internalError, message: "\(error)")
                }
                if Task.isCancelled && answer.kind == .reply {
                    send(.error(id: id, code: .cancelled, message: "cancelled"))
                    answer.closeFDs()
                } else {
                    send(answer)
                }
                _ = connection.tasks.withLock { $0.removeValue(forKey: id) }
            }
            connection.tasks.withLock { $0[id] = task }
        case .oneway:
            let app = self.app
            let message = Message(frame.payload, fileDescriptors: frame.fds)
            Task(executorPreference: executor) { await HostConnection.$current.withValue(host) { await app.handle(oneWay: message) } }
        case .cancel:
            connection.tasks.withLock { $0[frame.id] }?.cancel()
        case .reply:
            // The host's answer to one of the extension's own requests; an unknown id breaks
            // the protocol and ends the connection.
            return host.answerArrived(frame)
        case .error where frame.id != 0:
            return host.answerArrived(frame)
        case .goodbye:
            return false
        default:
            frame.closeFDs()
            send(.error(id: frame.id, code: .protocolError, message: "unexpected \(frame.kind)"))
        }
        return true
    }
}

/// Writes a line to stderr (fd 2) with one write(2): no stdio state shared between threads.
func report(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

/// Threads for the control socket and connections. A thread whose connection ended waits for the
/// next turn (up to ``maximumIdle`` wait), so that in the steady state a connection costs no
/// thread creation.
final class ConnectionThreads: Sendable {
    private struct State {
        var work: [@Sendable () -> Void] = []
        /// Threads waiting (or about to wait) on `available`.
        var idle = 0
    }

    private let state = Mutex(State())
    private let available = DispatchSemaphore(value: 0)
    let maximumIdle = 4

    /// Starts `count` threads that wait for work.
    func prestart(_ count: Int) {
        for _ in 0..<count {
            state.withLock { $0.idle += 1 }
            startThread { [self] in
                if let first = self.waitForWork() { self.loop(first) }
            }
        }
    }

    /// Runs `body` on a waiting thread, or on a new one if none waits.
    func run(_ body: @escaping @Sendable () -> Void) {
        let handedOver = state.withLock { state -> Bool in
            guard state.idle > 0 else { return false }
            state.idle -= 1
            state.work.append(body)
            return true
        }
        if handedOver {
            available.signal()
        } else {
            startThread { [self] in self.loop(body) }
        }
    }

    private func loop(_ first: @escaping @Sendable () -> Void) {
        var body = first
        while true {
            body()
            let stay = state.withLock { state -> Bool in
                guard state.idle < maximumIdle else { return false }
                state.idle += 1
                return true
            }
            guard stay, let next = waitForWork() else { return }
            body = next
        }
    }

    /// For a thread counted in `idle`: the next piece of work.
    private func waitForWork() -> (@Sendable () -> Void)? {
        available.wait()
        return state.withLock { $0.work.isEmpty ? nil : $0.work.removeFirst() }
    }
}

/// The control socket (fd 3), used by one thread at a time: the one leading (see `lead`), which
/// hands it over with its turn. The lock is never contended; it lets the compiler check that
/// each use is one at a time.
final class ControlSocket: Sendable {
    let socket: Mutex<FrameSocket>
    /// The socket's descriptor, owned by `socket` (open until the process exits): polled
    /// without taking the lock.
    let descriptor: FileDescriptor

    /// Takes the number the host gave the process (fd 3).
    init(descriptor: Int32) {
        guard let owned = FileDescriptor(adopting: descriptor) else { preconditionFailure("the control socket is fd \(descriptor)") }
        self.descriptor = owned
        socket = Mutex(FrameSocket(descriptor: owned))
    }
}

/// How long a new connection's thread looks for the host's first request before it sleeps.
let firstRequestSpinNanoseconds: UInt64 = 50_000

/// A batch of requests that ran longer than this makes a busy connection: its thread lets go of
/// the control socket (see `serve`), so a CONNECT waits for at most one such batch.
let busyBatchNanoseconds: UInt64 = 1_000_000

func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// Tunes glibc's malloc for the SDK (through dlsym: Glibc's module does not export malloc.h):
/// - at most `arenas` arenas (see the caller);
/// - payloads up to 4 MiB come from the arenas and freed memory up to 16 MiB stays there.
///   Otherwise a 1 MiB payload was, in about half the runs of a process, fresh memory each time
///   (mmap'd, or trimmed from the arena after each frame and faulted in again page by page):
///   perf showed the reader thread in page faults and page clearing, and the 1 MiB throughput
///   at half. With these it stays at the raw socketpair's.
func tuneMalloc(arenas: Int32) {
    mallopt(-8 /* M_ARENA_MAX */, arenas)
    mallopt(-3 /* M_MMAP_THRESHOLD */, 4 << 20)
    mallopt(-1 /* M_TRIM_THRESHOLD */, 16 << 20)
}

private func mallopt(_ parameter: Int32, _ value: Int32) {
    typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
    _ = unsafeBitCast(symbol, to: Mallopt.self)(parameter, value)
}

/// A detached thread running `body`, 2 MiB of stack (not the 8 MiB default: address space is
/// bounded inside a sandbox). An extension that cannot start one exits (71).
func startThread(_ body: @escaping @Sendable () -> Void) {
    do {
        try DetachedThread.start(name: "xsb-extension", stackSize: 2 << 20, body)
    } catch {
        report("extension: cannot start a thread (\(error.code))")
        exit(71)
    }
}

extension FrameSender {
    /// Makes every further read and write fail, so the reader loop ends.
    func shutdownReadAndWrite() {
        if let descriptor { _ = Glibc.shutdown(descriptor.rawValue, Int32(SHUT_RDWR)) }
    }
}
