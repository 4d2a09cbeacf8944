import Glibc

/// Copies bytes between the caller's standard streams and the sandbox's, on one thread of its
/// own with one poll loop: from the caller's terminal to the pseudo-terminal and back, and
/// through pipes for the caller's streams that cannot be reopened (sockets and the like).
///
/// It never changes a file status flag of the caller's descriptors (they are shared with the
/// caller's other processes): sockets are read and written with MSG_DONTWAIT, anything else
/// only after poll said it is ready. Its own ends (the master, its pipe ends) are non-blocking.
final class StreamRelay: @unchecked Sendable {
    struct Channel {
        enum Direction { case towardSandbox, fromSandbox }
        var source: Int32
        var destination: Int32
        var direction: Direction
        /// The relay's end of a pipe to the sandbox, closed when the channel ends (the program
        /// then sees end of file on its input, or EPIPE on its output).
        var ownsSource = false
        var ownsDestination = false
    }

    private struct State {
        var channel: Channel
        let sourceIsSocket: Bool
        let destinationIsSocket: Bool
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var start = 0, end = 0
        var sourceOpen = true
        var open = true
        /// The destination failed while the source is not ours to close (the master): keep
        /// reading so the program never blocks, and drop what it writes.
        var discard = false
        var pending: Bool { start < end }
    }

    /// After the program ended: how long the relay waits with nothing moving before it stops
    /// (its output normally drains at once: the sandbox's processes are gone with its init).
    static let drainIdleMilliseconds = 2_000

    private var states: [State]
    private let terminal: PseudoTerminal?
    /// "W": copy the window size; "E": the program ended, drain and stop.
    let wakeRead: Int32, wakeWrite: Int32
    private var thread: pthread_t?

    init(channels: [Channel], terminal: PseudoTerminal?) throws(StreamSetupError) {
        let fds = try SandboxStreams.makePipe(for: "the relay")
        for fd in fds { _ = fcntl(fd, F_SETFL, O_NONBLOCK) }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        self.terminal = terminal
        states = channels.map { channel in
            State(channel: channel, sourceIsSocket: Self.isSocket(channel.source), destinationIsSocket: Self.isSocket(channel.destination))
        }
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    private static func isSocket(_ fd: Int32) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK
    }

    /// Starts the relay thread (joinable: ``finish()`` waits for it).
    func start() throws(StreamSetupError) {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let relay = Unmanaged<StreamRelay>.fromOpaque(raw!).takeRetainedValue()
            relay.run()
            return nil
        }, context)
        guard rc == 0 else {
            Unmanaged<StreamRelay>.fromOpaque(context).release()
            errno = rc
            throw StreamSetupError("pthread_create for the relay")
        }
        self.thread = thread
    }

    /// Tells the relay the program ended and waits until its output is drained.
    func finish() {
        guard let thread else {  // never started: only its own fds to close
            for index in states.indices { end(&states[index]) }
            return
        }
        var byte = UInt8(ascii: "E")
        _ = write(wakeWrite, &byte, 1)
        pthread_join(thread, nil)
        self.thread = nil
    }

    private func run() {
        var exiting = false
        var lastProgress = Self.milliseconds()
        var pollFDs: [pollfd] = []
        var roles: [(index: Int, isSource: Bool)] = []
        while true {
            pollFDs.removeAll(keepingCapacity: true)
            roles.removeAll(keepingCapacity: true)
            pollFDs.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
            for (index, state) in states.enumerated() where state.open {
                if state.pending {
                    pollFDs.append(pollfd(fd: state.channel.destination, events: Int16(POLLOUT), revents: 0))
                    roles.append((index, false))
                } else if state.sourceOpen {
                    pollFDs.append(pollfd(fd: state.channel.source, events: Int16(POLLIN), revents: 0))
                    roles.append((index, true))
                }
            }
            if exiting && roles.isEmpty { break }
            let ready = poll(&pollFDs, nfds_t(pollFDs.count), exiting ? 100 : -1)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if ready == 0 {
                if Self.milliseconds() - lastProgress > Self.drainIdleMilliseconds { break }
                continue
            }
            if pollFDs[0].revents != 0 {
                var bytes = [UInt8](repeating: 0, count: 64)
                let count = read(wakeRead, &bytes, bytes.count)
                if count > 0 {
                    if bytes[0..<count].contains(UInt8(ascii: "W")) { terminal?.copyWindowSize() }
                    if !exiting && bytes[0..<count].contains(UInt8(ascii: "E")) {
                        exiting = true
                        lastProgress = Self.milliseconds()
                        // Nothing more goes in: what the program did not read stays unread.
                        for index in states.indices where states[index].channel.direction == .towardSandbox {
                            end(&states[index])
                        }
                    }
                }
            }
            for (slot, role) in roles.enumerated() where pollFDs[slot + 1].revents != 0 && states[role.index].open {
                let moved = role.isSource ? fill(&states[role.index]) : drain(&states[role.index])
                if moved { lastProgress = Self.milliseconds() }
            }
        }
        for index in states.indices where states[index].open { end(&states[index]) }
    }

    /// Reads what the source has. Returns whether anything moved.
    private func fill(_ state: inout State) -> Bool {
        let fd = state.channel.source
        let count = state.buffer.withUnsafeMutableBytes { bytes in
            state.sourceIsSocket ? recv(fd, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT)) : read(fd, bytes.baseAddress, bytes.count)
        }
        if count > 0 {
            if !state.discard {
                state.start = 0
                state.end = count
            }
            return true
        }
        if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return false }
        // End of file, or EIO from the master once every copy of the slave is closed.
        state.sourceOpen = false
        end(&state)
        return true
    }

    /// Writes what is pending. Returns whether anything moved.
    private func drain(_ state: inout State) -> Bool {
        let fd = state.channel.destination
        let (start, end) = (state.start, state.end)
        let count = state.buffer.withUnsafeBytes { bytes in
            state.destinationIsSocket
                ? send(fd, bytes.baseAddress! + start, end - start, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                : write(fd, bytes.baseAddress! + start, end - start)
        }
        if count > 0 {
            state.start += count
            if !state.pending && !state.sourceOpen { self.end(&state) }
            return true
        }
        if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return false }
        state.start = state.end
        if state.channel.direction == .fromSandbox && !state.channel.ownsSource {
            state.discard = true
            return true
        }
        self.end(&state)
        return true
    }

    private func end(_ state: inout State) {
        guard state.open else { return }
        state.open = false
        state.start = state.end
        if state.channel.ownsSource { close(state.channel.source) }
        if state.channel.ownsDestination { close(state.channel.destination) }
    }

    private static func milliseconds() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return now.tv_sec * 1000 + now.tv_nsec / 1_000_000
    }
}
