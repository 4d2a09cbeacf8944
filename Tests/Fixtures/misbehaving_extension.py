# A misbehaving extension for the host's robustness tests: it speaks the wire protocol
# (docs/wire-protocol.md) correctly up to the handshake, then breaks it in the way its
# connection's host name asks for. Run as `python3 -c "$(cat this file)"` with fd 3.
import errno, os, select, signal, socket, struct, sys, threading, time


def send_fds_waiting(sock, buffers, fds):
    """send_fds, waiting while the kernel refuses the fds for now: fds in flight are bounded per
    user, and every sandbox of a root host runs as the same host uid (another test's fd flood)."""
    while True:
        try:
            return socket.send_fds(sock, buffers, fds)
        except OSError as e:
            if e.errno != errno.ETOOMANYREFS:
                raise
            time.sleep(0.001)

def frame(kind, id=0, payload=b"", nfds=0, flags=0):
    return struct.pack(">IBBHIQ", 16 + len(payload), kind, flags, nfds, 0, id) + payload

def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data

def read_frame(sock):
    (length,) = struct.unpack(">I", read_exact(sock, 4))
    header = read_exact(sock, 16)
    kind, flags, nfds, _, id = struct.unpack(">BBHIQ", header)
    return kind, id, read_exact(sock, length - 16)

kept = []  # sockets whose close would undo a lingering socket (see below)

def lingering_socket():
    """A TCP socket on the sandbox's own loopback whose last close blocks for 120 s: its peer is
    never accepted and never reads, its send buffer is full, and SO_LINGER is {1, 120}."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    client.setblocking(False)
    try:
        while True:
            client.send(b"x" * 65536)
    except BlockingIOError:
        pass
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 120))
    kept.append(listener)  # closing it would reset the connection, and end the linger
    return client

def send_lingering(sock, data):
    """Sends `data` with a lingering socket attached to its first byte. Our copy is closed before
    the rest is sent: the receiver, which cannot act on the frame before its header is whole,
    holds the last reference when it closes the socket."""
    client = lingering_socket()
    socket.send_fds(sock, [data[:1]], [client.fileno()])
    client.close()
    sock.sendall(data[1:])

def echo(sock):
    while True:
        kind, id, payload = read_frame(sock)
        if kind == 2:
            sock.sendall(frame(3, id, payload))
        elif kind == 7:
            return

def serve(sock):
    kind, _, payload = read_frame(sock)  # HELLO
    name = payload[6:].decode()
    behaviour = name.split("/")[0]
    if name.startswith("silent"):
        threading.Event().wait()         # never answer the handshake
    if behaviour == "bad-version":       # version 2: the host must send ERROR id 0 code 4 (§5.3)
        sock.sendall(frame(1, 0, struct.pack(">HI", 2, 16 << 20)))
        try:
            kind, id, payload = read_frame(sock)
        except EOFError:
            os._exit(46)                 # the connection ended without the ERROR
        os._exit(44 if (kind, id, payload[:4]) == (4, 0, struct.pack(">I", 4)) else 45)
    maximum = 4096 if behaviour == "small-max" else 16 << 20
    sock.sendall(frame(1, 0, struct.pack(">HI", 1, maximum)))
    if behaviour == "no-read":           # never reads again: the host's send queue fills
        threading.Event().wait()
    if behaviour == "small-max":         # an echo that takes frames of at most 4096 bytes
        echo(sock)
        return
    kind, id, _ = read_frame(sock)       # the host's first REQUEST
    if behaviour == "linger-late-reply":  # the answer to a cancelled request: dropped by the host
        sock.sendall(frame(5, 0, b"request read"))
        while read_frame(sock)[0] != 6:  # its CANCEL
            pass
        send_lingering(sock, frame(3, id, b"late", 1))
        echo(sock)
        return
    if behaviour == "fd-reply":          # a reply with a pipe's write end; says when the host closed it
        r, w = os.pipe()
        send_fds_waiting(sock, [frame(3, id, b"with fd", 1)], [w])
        os.close(w)
        os.read(r, 1)                    # end of file: no copy of the write end is left
        sock.sendall(frame(5, 0, b"closed"))
        echo(sock)
        return
    if behaviour == "linger-reply":      # a reply the host hands to its caller
        send_lingering(sock, frame(3, id, b'"ok"', 1))
        echo(sock)
        return
    if behaviour == "linger-undeclared": # a reply that declares no fd, with one: a protocol error
        send_lingering(sock, frame(3, id, b"", 0))
    elif behaviour == "linger-teardown": # the start of a reply with its fd, the rest never comes
        send_lingering(sock, frame(3, id, b"x" * 100, 1)[:30])
    elif behaviour == "linger-unread":   # a request the host holds, then a frame it does not read
        sock.sendall(frame(2, 1, b"hold"))
        send_lingering(sock, frame(5, 0, b"", 1))
    if behaviour == "request-flood":     # requests as fast as it can for 3 s, reading no answer
        sock.setblocking(False)
        sent, pending, deadline = 0, b"", time.monotonic() + 3
        while time.monotonic() < deadline:
            if not pending:
                pending = b"".join(frame(2, sent + k, b"r" * 64) for k in range(1, 65))
                sent += 64
            try:
                pending = pending[sock.send(pending):]
            except BlockingIOError:
                select.select([], [sock], [], 0.05)
        answered = 0
        def read_answers():              # now every answer, one per request
            nonlocal answered
            while answered < sent:
                kind, rid, _ = read_frame(sock)
                if kind in (3, 4) and 1 <= rid <= sent:
                    answered += 1
        sock.setblocking(True)
        reader = threading.Thread(target=read_answers)
        reader.start()                   # (the host reads the rest only as answers leave)
        sock.sendall(pending)
        reader.join()
        sock.sendall(frame(3, id, f"{sent} {answered}".encode()))
        echo(sock)
        return
    if behaviour == "oneway-flood":      # 20,000 one-way messages of 1 KiB; notes how many went
        total, sent, stalled_at = 20000, 0, None  # out before a send first blocked for 0.5 s
        sock.setblocking(False)
        pending = b""
        while sent < total or pending:
            if not pending:
                pending = frame(5, 0, b"o" * 1024)
                sent += 1
            try:
                pending = pending[sock.send(pending):]
            except BlockingIOError:
                started = time.monotonic()
                select.select([], [sock], [], 60)
                if stalled_at is None and time.monotonic() - started >= 0.5:
                    stalled_at = sent - 1
        sock.setblocking(True)
        sock.sendall(frame(3, id, f"{total} {total if stalled_at is None else stalled_at}".encode()))
        echo(sock)
        return
    if behaviour == "goodbye":           # answer, then leave of its own accord (§7.3)
        sock.sendall(frame(3, id, b"bye"))
        control.sendall(frame(7))
        os._exit(0)
    if behaviour == "oversize":
        sock.sendall(struct.pack(">I", 0xFFFFFFF0) + b"\x03" * 16)
    elif behaviour == "truncated":
        sock.sendall(frame(3, id, b"x" * 100)[:60])
        sock.shutdown(socket.SHUT_WR)
    elif behaviour == "garbage":
        sock.sendall(os.urandom(64))
    elif behaviour == "unknown-kind":
        sock.sendall(frame(99, id))
    elif behaviour == "unknown-id":
        sock.sendall(frame(3, id + 1000, b"not yours"))
    elif behaviour == "flood":           # one-way messages the host has no handler for: dropped
        for _ in range(100000):
            sock.sendall(frame(5, 0, b"f" * 1024))
        sock.sendall(frame(3, id, b"flooded"))
    elif behaviour == "fd-flood":
        r, w = os.pipe()
        for _ in range(1000):
            send_fds_waiting(sock, [frame(5, 0, b"", 16)], [r] * 16)
        sock.sendall(frame(3, id, b"flooded"))
    threading.Event().wait()  # keep the socket open: the host must act on its own

control = socket.socket(fileno=3)
if "die-before-ready" in sys.argv[1:]:     # killed during its launch, before READY
    time.sleep(0.2)
    os.kill(os.getpid(), 9)
if "close-control-on-usr1" in sys.argv[1:]:  # on SIGUSR1: alive, but no connection can reach it
    def close_control(*_):
        control.close()
        threading.Event().wait()
    # Before READY: the host's test signals as soon as the launch returns, and SIGUSR1's
    # default action would kill us.
    signal.signal(signal.SIGUSR1, close_control)
if "linger-on-control" in sys.argv[1:]:  # after READY, a CONNECT from the wrong side, with an fd
    def linger_on_control():
        time.sleep(0.2)
        send_lingering(control, frame(8, 1, b"", 1))
    threading.Thread(target=linger_on_control, daemon=True).start()
leave_on_connect = threading.Event()
if "goodbye-on-connect-after-usr2" in sys.argv[1:]:  # on SIGUSR2: the next CONNECT is not taken
    signal.signal(signal.SIGUSR2, lambda *_: leave_on_connect.set())
# READY carries the identifier the host launched us as (docs/wire-protocol.md §7).
control.sendall(frame(9, 0, os.environ.get("EXTSANDBOX_EXTENSION_IDENTIFIER", "misbehaving").encode()))
while True:
    msg, fds, _, _ = socket.recv_fds(control, 20, 1)
    if not msg:
        os._exit(0)
    if "crash-on-goodbye" in sys.argv[1:] and msg[4:5] == b"\x07":  # crashes as it is asked to end
        os.kill(os.getpid(), signal.SIGSEGV)
    if fds and leave_on_connect.is_set():  # leaves of its own accord as a connection comes (§7.3)
        control.sendall(frame(7))
        os._exit(0)
    for fd in fds:
        threading.Thread(target=serve, args=(socket.socket(fileno=fd),), daemon=True).start()
