import CMechanismSupport
import CSandboxShim
import Glibc
import Testing

/// control.c: struct xsb_msg over a SOCK_SEQPACKET pair, both sides: send and receive, the
/// supervisor's reading of a launch's reports, the init's waiting and serving.
@Suite("Control channel: messages encoded, decoded, acted on")
struct ControlChannelTests {
    /// A socket pair like the launch's (supervisor end, init end), closed at the end of `body`.
    static func withPair<T>(_ body: (Int32, Int32) throws -> T) throws -> T {
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        return try body(pair[0], pair[1])
    }

    /// One message as the init writes it.
    struct Message: Sendable {
        var type: xsb_msg_type
        var step: xsb_step = XSB_STEP_NONE
        var value: Int32 = 0
        var detail = ""

        func send(on fd: Int32) {
            var msg = xsb_msg()
            msg.type = type.rawValue
            msg.step = Int32(step.rawValue)
            msg.value = value
            withUnsafeMutableBytes(of: &msg.detail) { raw in for (i, byte) in detail.utf8.prefix(raw.count).enumerated() { raw[i] = byte } }
            #expect(Glibc.send(fd, &msg, MemoryLayout<xsb_msg>.size, 0) == MemoryLayout<xsb_msg>.size)
        }
    }

    @Test("a message sent is the message received; nothing pending, a short message and a closed peer each say so")
    func sendAndReceive() throws {
        try Self.withPair { supervisor, initSide in
            #expect(xsb_send_msg(supervisor, XSB_MSG_SIGNAL.rawValue, 15) == 0)
            var msg = xsb_msg()
            #expect(xsb_recv_msg(initSide, &msg) == 1)
            #expect(msg.type == XSB_MSG_SIGNAL.rawValue && msg.value == 15 && msg.step == 0 && msg.value2 == 0 && cText(msg.detail) == "")
            #expect(xsb_recv_msg(initSide, &msg) == 0, "nothing pending")

            // A detail without its NUL comes out terminated.
            Message(type: XSB_MSG_ERROR, detail: String(repeating: "d", count: 300)).send(on: initSide)
            #expect(xsb_recv_msg(supervisor, &msg) == 1)
            #expect(cText(msg.detail) == String(repeating: "d", count: 239))

            let short: [UInt8] = Array(repeating: 1, count: 10)
            #expect(send(initSide, short, short.count, 0) == 10)
            #expect(xsb_recv_msg(supervisor, &msg) == -EPROTO)
        }
        try Self.withPair { supervisor, initSide in
            shutdown(initSide, Int32(SHUT_RDWR))
            var msg = xsb_msg()
            #expect(xsb_recv_msg(supervisor, &msg) == -EPIPE)
            #expect(xsb_send_msg(supervisor, XSB_MSG_GO.rawValue, 0) == -EPIPE)
        }
    }

    struct Launch: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let messages: [Message]
        var closed = false
        var short = false
        let result: Int32
        var payload: pid_t = 0
        var violation = Int32(XSB_NO_VIOLATION)
        var audited: [Int32] = []
        var step: xsb_step = XSB_STEP_NONE
        var err: Int32 = 0
        var detail = ""
    }

    @Test("the supervisor's reading of the init's launch reports", arguments: [
        Launch(testDescription: "nothing yet", messages: [], result: 0),
        Launch(testDescription: "READY", messages: [Message(type: XSB_MSG_READY, value: 42)], result: 1, payload: 42),
        Launch(testDescription: "audited calls, then READY",
               messages: [Message(type: XSB_MSG_AUDITED, value: 101), Message(type: XSB_MSG_AUDITED, value: 59), Message(type: XSB_MSG_READY, value: 7)],
               result: 1, payload: 7, audited: [101, 59]),
        Launch(testDescription: "audited calls only", messages: [Message(type: XSB_MSG_AUDITED, value: 5)], result: 0, audited: [5]),
        Launch(testDescription: "a failing step",
               messages: [Message(type: XSB_MSG_ERROR, step: XSB_STEP_BIND_MOUNT, value: ENOENT, detail: "source /x")],
               result: -1, step: XSB_STEP_BIND_MOUNT, err: ENOENT, detail: "source /x"),
        Launch(testDescription: "a violation before READY", messages: [Message(type: XSB_MSG_VIOLATION, value: 101)], result: 1, violation: 101),
        Launch(testDescription: "an unnamed violation", messages: [Message(type: XSB_MSG_VIOLATION, value: Int32(XSB_UNNAMED_VIOLATION))],
               result: 1, violation: Int32(XSB_UNNAMED_VIOLATION)),
        Launch(testDescription: "a negative syscall number", messages: [Message(type: XSB_MSG_VIOLATION, value: -7)], result: 1, violation: Int32(XSB_UNNAMED_VIOLATION)),
        Launch(testDescription: "other messages are not the launch's",
               messages: [Message(type: XSB_MSG_ACK, value: 3), Message(type: XSB_MSG_EXIT, value: 9), Message(type: XSB_MSG_READY, value: 3)],
               result: 1, payload: 3),
        Launch(testDescription: "the init gone", messages: [], closed: true,
               result: -1, step: XSB_STEP_HANDSHAKE, err: EPIPE, detail: "sandbox init exited"),
        Launch(testDescription: "a message of another size", messages: [], short: true,
               result: -1, step: XSB_STEP_HANDSHAKE, err: EPROTO, detail: "control message"),
    ])
    func pollLaunch(_ launch: Launch) throws {
        try Self.withPair { supervisor, initSide in
            for message in launch.messages { message.send(on: initSide) }
            if launch.short { #expect(send(initSide, [UInt8](repeating: 0, count: 8), 8, 0) == 8) }
            if launch.closed { shutdown(initSide, Int32(SHUT_RDWR)) }
            var result = xsb_spawn_result()
            result.early_violation = Int32(XSB_NO_VIOLATION)
            var step: Int32 = 0, err: Int32 = 0
            var detail = [CChar](repeating: 0, count: 256)
            #expect(xsb_control_poll_launch(supervisor, &result, &step, &err, &detail, detail.count) == launch.result)
            #expect(result.payload_pid == launch.payload)
            #expect(result.early_violation == launch.violation)
            #expect(withUnsafeBytes(of: result.audited) { Array($0.bindMemory(to: Int32.self).prefix(Int(result.audited_count))) } == launch.audited)
            #expect(step == Int32(launch.step.rawValue) && err == launch.err && cText(detail) == launch.detail)
        }
    }

    /// An fd that may come with a message, and whether the supervisor keeps it.
    struct PassedDescriptor: Sendable, CustomTestStringConvertible {
        enum Kind: Sendable { case mountNamespace, networkNamespace, pipe, socket }
        var type: xsb_msg_type
        var kind: Kind
        var kept: Bool
        var testDescription: String { "\(kind) with message \(type.rawValue): \(kept ? "kept" : "closed")" }
    }

    @Test("only the EXIT report's mount namespace is kept; any other fd is closed at once", arguments: [
        PassedDescriptor(type: XSB_MSG_EXIT, kind: .mountNamespace, kept: true),
        PassedDescriptor(type: XSB_MSG_ACK, kind: .mountNamespace, kept: false),
        PassedDescriptor(type: XSB_MSG_EXIT, kind: .networkNamespace, kept: false),
        PassedDescriptor(type: XSB_MSG_EXIT, kind: .pipe, kept: false),
        PassedDescriptor(type: XSB_MSG_EXIT, kind: .socket, kept: false),
    ])
    func passedDescriptor(_ passed: PassedDescriptor) throws {
        try Self.withPair { supervisor, initSide in
            // What is sent, and the far end that tells whether the received copy was closed.
            var farEnd: Int32 = -1
            let sent: Int32
            switch passed.kind {
            case .mountNamespace: sent = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)
            case .networkNamespace: sent = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)
            case .pipe:
                var ends: [Int32] = [-1, -1]
                try #require(pipe(&ends) == 0)
                for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                (sent, farEnd) = (ends[0], ends[1])
            case .socket:
                var ends: [Int32] = [-1, -1]
                try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
                (sent, farEnd) = (ends[0], ends[1])
            }
            try #require(sent >= 0)
            defer { if farEnd >= 0 { close(farEnd) } }
            #expect(xsbt_send_msg_with_fd(initSide, UInt32(passed.type.rawValue), sent) == 0)
            close(sent)  // only the copy in flight is left

            var message = xsb_msg()
            var received: Int32 = -1
            #expect(xsb_recv_msg_with_fd(supervisor, &message, &received) == 1)
            #expect(message.type == UInt32(passed.type.rawValue))
            #expect((received >= 0) == passed.kept)
            if received >= 0 { close(received) }
            if farEnd >= 0 {
                // Its last copy is gone: the far end sees it. (Waited for: a test forking in
                // parallel holds copies of this process's fds until its child execs or exits.)
                var entry = pollfd(fd: farEnd, events: 0, revents: 0)
                #expect(poll(&entry, 1, 10_000) == 1 && entry.revents & Int16(POLLERR | POLLHUP) != 0, "revents \(entry.revents)")
            }
        }
    }

    @Test("the init's failure report replaces the supervisor's, and only a failure does")
    func initReport() throws {
        try Self.withPair { supervisor, initSide in
            var step = Int32(XSB_STEP_TIMEOUT.rawValue), err = ETIMEDOUT
            var detail = [CChar](repeating: 0, count: 64)
            Message(type: XSB_MSG_READY, value: 3).send(on: initSide)
            xsb_control_take_init_report(supervisor, &step, &err, &detail, detail.count)
            #expect(step == Int32(XSB_STEP_TIMEOUT.rawValue) && err == ETIMEDOUT && cText(detail) == "")
            xsb_child_report(initSide, Int32(XSB_STEP_PROC_MOUNT.rawValue), EPERM, "/proc")
            xsb_control_take_init_report(supervisor, &step, &err, &detail, detail.count)
            #expect(step == Int32(XSB_STEP_PROC_MOUNT.rawValue) && err == EPERM && cText(detail) == "/proc")
        }
    }

    @Test("the init waits for exactly the message it needs; anything else, or EOF, fails")
    func waitFor() throws {
        try Self.withPair { supervisor, initSide in
            #expect(xsb_send_msg(supervisor, XSB_MSG_GO.rawValue, 0) == 0)
            #expect(xsb_control_wait_for(initSide, XSB_MSG_GO.rawValue) == 0)
            #expect(xsb_send_msg(supervisor, XSB_MSG_RESUME.rawValue, 0) == 0)
            #expect(xsb_control_wait_for(initSide, XSB_MSG_GO.rawValue) == -1)
            shutdown(supervisor, Int32(SHUT_RDWR))
            #expect(xsb_control_wait_for(initSide, XSB_MSG_GO.rawValue) == -1)
            #expect(xsb_control_serve_request(initSide, 0) == -1, "EOF: the supervisor is gone")
        }
    }

    @Test("a SIGNAL request reaches the payload's process group and is acknowledged", arguments: [
        (SIGTERM, SIGTERM), (SIGUSR1, SIGUSR1),
        // Not a signal: nothing is sent (the payload ends only by the case's own SIGKILL), still acknowledged.
        (0, SIGKILL), (65, SIGKILL), (-9, SIGKILL),
    ] as [(Int32, Int32)])
    func signalRequest(signal: Int32, endedBy: Int32) throws {
        let out = try outcome { xsbt_serve_signal_request(signal, $0) }
        let numbers = out.numbers
        #expect(numbers[0] == 0 && numbers[1] == Int64(XSB_MSG_ACK.rawValue) && numbers[2] == Int64(XSB_MSG_SIGNAL.rawValue) && numbers[3] == 0,
                "\(numbers[0..<4])")
        let status = Int32(numbers[4])
        #expect(status & 0x7f == endedBy, "the payload's wait status \(status)")
    }
}
