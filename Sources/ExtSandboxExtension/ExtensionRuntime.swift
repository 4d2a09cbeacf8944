import Dispatch
import ExtSandboxWire
import Glibc
import Synchronization

/// The extension side of the wire protocol: the control socket on fd 3, READY, CONNECT, and
/// one reader thread per connection (blocking reads stay off the concurrency pool), with each
/// request answered from a task of its own.
final class ExtensionRuntime<Extension: AppExtension>: Sendable {
    private let app: Extension
    /// A thread started ahead of time that serves the next connection: creating a thread while
    /// the host waits for the handshake would be a good part of the connection's cost.
    private let standby = Mutex<StandbyThread?>(nil)

    init(extension app: Extension) {
        self.app = app
    }

    private func prepareStandby() {
        let thread = StandbyThread { [self] fd in self.serve(descriptor: fd) }
        standby.withLock { $0 = thread }
    }

    func run() async -> Never {
        let control = UncheckedBox(FrameSocket(descriptor: ExtSandboxWire.controlSocketDescriptor))
        let identifier = CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "") } ?? "extension"
        do {
            try control.value.send(.ready(identifier: identifier))
        } catch {
            report("extension: cannot reach the host on fd 3: \(error)")
            exit(70)
        }
        prepareStandby()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            startThread { [self] in
                // The host hands over each new connection as a CONNECT with its socket.
                while let frame = try? control.value.receive() {
                    if frame.kind == .connect, frame.fds.count == 1 {
                        let fd = frame.fds[0]
                        if let ready = standby.withLock({ thread -> StandbyThread? in defer { thread = nil }; return thread }) {
                            ready.handOff(fd)
                        } else {
                            startThread { [self] in self.serve(descriptor: fd) }
                        }
                    } else if frame.kind == .goodbye {
                        // The host asks the extension to end (docs/wire-protocol.md).
                        try? control.value.send(.goodbye)
                        exit(0)
                    } else {
                        frame.closeFDs()
                    }
                }
                done.resume()  // EOF: the host is gone
            }
        }
        exit(0)
    }

    /// One connection: handshake, then requests until GOODBYE or EOF.
    private func serve(descriptor: Int32) {
        // Reader (this thread) and writer (any task, under the lock) on separate descriptors of
        // the same socket: FrameSocket is not thread-safe.
        let socket = FrameSocket(descriptor: descriptor)
        let connection = ConnectionWriter(FrameSocket(descriptor: fcntl(descriptor, F_DUPFD_CLOEXEC, 0)))
        let send = connection.send
        defer {
            for task in connection.tasks.withLock({ Array($0.values) }) { task.cancel() }
        }

        guard let first = try? socket.receive(), first.kind == .hello, let hello = try? first.hello() else {
            socket.close()
            connection.writer.withLock { $0.value.close() }
            return
        }
        do {
            try hello.checkVersion()
        } catch {
            send(.error(id: 0, code: .protocolError, message: "\(error)"))
            socket.close()
            connection.writer.withLock { $0.value.close() }
            return
        }
        guard app.accept(ConnectionRequest(hostName: hello.name)) else {
            send(.error(id: 0, code: .rejected, message: "the extension rejected the connection"))
            socket.close()
            connection.writer.withLock { $0.value.close() }
            return
        }
        connection.writer.withLock { $0.value.encoder.maximumFrameSize = hello.maximumFrameSize }
        send(.hello(Hello(name: CommandLine.arguments.first)))
        // The host has its answer: now there is time to start the thread for the next one.
        if standby.withLock({ $0 == nil }) { prepareStandby() }

        // Requests run on this thread: it is their tasks' preferred executor, so a handler that
        // does not suspend answers without waking any other thread (a thread hop per request
        // costs more than the whole round trip of the socket). A handler that awaits resumes
        // here too, woken through the executor's pipe.
        let executor = ReaderExecutor()
        guard (try? socket.setNonBlocking(true)) != nil else { return }
        var open = true
        while open {
            var readable = pollfd(fd: socket.descriptor, events: Int16(POLLIN), revents: 0)
            _ = poll(&readable, 1, -1)
            while open {
                let result: FrameSocket.ReceiveResult
                do { result = try socket.tryReceive() } catch { open = false; break }
                guard case .frame(let frame) = result else {
                    if case .closed = result { open = false }
                    break
                }
                open = dispatch(frame, connection: connection, executor: executor)
            }
            executor.runPending()
        }
        // What still runs continues on the global executor; the deferred cancel above ends it.
        socket.close()
        connection.writer.withLock { $0.value.close() }
    }

    /// Handles one frame of an accepted connection; false ends the connection.
    private func dispatch(_ frame: Frame, connection: ConnectionWriter, executor: ReaderExecutor) -> Bool {
        let send = connection.send
        switch frame.kind {
        case .request:
            let id = frame.id, app = self.app
            let message = UncheckedBox(Message(frame.payload, fileDescriptors: frame.fds))
            let task = Task(executorPreference: executor) {
                let answer: Frame
                do {
                    let reply = try await app.handle(request: message.value)
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
            let message = UncheckedBox(Message(frame.payload, fileDescriptors: frame.fds))
            Task(executorPreference: executor) { await app.handle(oneWay: message.value) }
        case .cancel:
            connection.tasks.withLock { $0[frame.id] }?.cancel()
        case .goodbye:
            return false
        default:
            frame.closeFDs()
            send(.error(id: frame.id, code: .protocolError, message: "unexpected \(frame.kind)"))
        }
        return true
    }
}

/// A task executor that is one connection's reader thread: a job enqueued from that thread
/// (a request just read, a handler continuing without having suspended) runs there at the next
/// ``runPending()``; a job enqueued from anywhere else (a handler resumed by a timer or another
/// task) goes to the global executor rather than waiting for the reader to wake. No pipe or
/// eventfd: the `hardened` policy allows neither.
final class ReaderExecutor: TaskExecutor, @unchecked Sendable {
    private let jobs = Mutex<[UnownedJob]>([])
    private let thread = pthread_self()

    func enqueue(_ job: consuming ExecutorJob) {
        if pthread_equal(pthread_self(), thread) != 0 {
            let unowned = UnownedJob(job)
            jobs.withLock { $0.append(unowned) }
        } else {
            globalConcurrentExecutor.enqueue(job)
        }
    }

    func runPending() {
        while true {
            let next: UnownedJob? = jobs.withLock { $0.isEmpty ? nil : $0.removeFirst() }
            guard let next else { return }
            next.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// The sending half of one connection, shared by the reader thread and the request tasks.
final class ConnectionWriter: Sendable {
    let writer: Mutex<UncheckedBox<FrameSocket>>
    let tasks = Mutex<[UInt64: Task<Void, Never>]>([:])

    init(_ socket: FrameSocket) {
        writer = Mutex(UncheckedBox(socket))
    }

    /// Sends whole frames one at a time; a failed send shuts the socket so the reader stops.
    var send: @Sendable (Frame) -> Void {
        { [self] frame in
            writer.withLock { box in
                do { try box.value.send(frame) } catch { box.value.shutdownReadAndWrite() }
                frame.closeFDs()
            }
        }
    }
}

/// Writes a line to stderr (fd 2) with one write(2): no stdio state shared between threads.
func report(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

/// A parked thread that serves one connection once it is handed the socket.
final class StandbyThread: Sendable {
    private let handed = DispatchSemaphore(value: 0)
    private let descriptor = Mutex<Int32>(-1)

    init(serve: @escaping @Sendable (Int32) -> Void) {
        startThread { [self] in
            handed.wait()
            serve(descriptor.withLock { $0 })
        }
    }

    func handOff(_ fd: Int32) {
        descriptor.withLock { $0 = fd }
        handed.signal()
    }
}

/// Carries a value the compiler cannot prove Sendable across one hand-off.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// A detached POSIX thread running `body` (no Foundation: extensions stay small).
func startThread(_ body: @escaping @Sendable () -> Void) {
    final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { raw in
        let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
        box.body()
        return nil
    }, context)
    if rc != 0 {
        Unmanaged<Box>.fromOpaque(context).release()
        report("extension: cannot start a thread (\(rc))")
        exit(71)
    }
    pthread_detach(thread)
}

extension FrameSocket {
    /// Makes every further read and write fail, so the reader loop ends.
    func shutdownReadAndWrite() {
        _ = Glibc.shutdown(descriptor, Int32(SHUT_RDWR))
    }
}
