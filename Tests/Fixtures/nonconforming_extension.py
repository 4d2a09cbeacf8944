#!/usr/bin/python3
# An extension for `extsandbox test`'s own tests (Tests/ExtensionCatalogTests/RunTestCommandTests):
# it speaks the wire protocol (docs/wire-protocol.md) as an echo, except for the one way it breaks
# it, chosen by the last part of its identifier ($EXTSANDBOX_EXTENSION_IDENTIFIER):
#   *.conforming   breaks nothing (the test run passes)
#   *.silent       never answers a request
#   *.crash        crashes (SIGSEGV) on its first request
#   *.forbidden    calls ptrace on its first request (the standard policy kills it)
#   *.bad-version  answers the host's HELLO with protocol version 2
#   *.lingers      ignores the host's GOODBYE on the control socket (killed after the grace)
#   *.wrong-ready  says READY with another identifier than the one it was launched as
# or the call envelope's system target (docs/wire-protocol.md §12.4), other requests echoed:
#   *.ping-silent    never answers a ping
#   *.ping-crash     crashes (SIGSEGV) on a ping
#   *.ping-garbage   answers a ping with another value than its argument
#   *.ping-refused   answers a ping with ERROR 21, as if it had no system target
#   *.typed-sloppy   answers a ping right, and any other call with a REPLY
import array, os, signal, socket, struct, sys, threading

MODE = os.environ.get("EXTSANDBOX_EXTENSION_IDENTIFIER", "").rsplit(".", 1)[-1]
HELLO, REQUEST, REPLY, ERROR, ONEWAY, CANCEL, GOODBYE, CONNECT, READY = range(1, 10)


def frame(kind, id=0, payload=b""):
    return struct.pack(">IBBHIQ", 16 + len(payload), kind, 0, 0, 0, id) + payload


def read_exact(sock, n, fds):
    data = b""
    while len(data) < n:
        chunk, ancillary, _, _ = sock.recvmsg(n - len(data), socket.CMSG_SPACE(16 * 4))
        if not chunk:
            raise EOFError
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[: len(payload) - len(payload) % 4])
                fds.extend(received)
        data += chunk
    return data


def read_frame(sock):
    fds = []
    (length,) = struct.unpack(">I", read_exact(sock, 4, fds))
    kind, _, nfds, _, id = struct.unpack(">BBHIQ", read_exact(sock, 16, fds))
    payload = read_exact(sock, length - 16, fds)
    return kind, id, payload, fds


def call_target(payload):
    """The target of a call envelope (§12.1), or None for other bytes."""
    if payload[:2] != b"\x01\x00" or len(payload) < 4:
        return None
    (length,) = struct.unpack(">H", payload[2:4])
    return payload[4:4 + length].decode("utf-8", "replace")


def ping_argument(payload):
    """The one argument of a call envelope of the system target."""
    at = 4 + struct.unpack(">H", payload[2:4])[0]
    at += 2 + struct.unpack(">H", payload[at:at + 2])[0] + 2
    (length,) = struct.unpack(">I", payload[at:at + 4])
    return payload[at + 4:at + 4 + length]


def serve(sock):
    try:
        kind, _, _, _ = read_frame(sock)  # the host's HELLO
        version = 2 if MODE == "bad-version" else 1
        sock.sendall(frame(HELLO, 0, struct.pack(">HI", version, 16 << 20) + b"nonconforming"))
        while True:
            kind, id, payload, fds = read_frame(sock)
            for fd in fds:
                os.close(fd)
            if kind == GOODBYE:
                return
            if kind != REQUEST:
                continue
            if MODE == "silent":
                continue
            target = call_target(payload)
            if target == "system" and MODE == "ping-silent":
                continue
            if target == "system" and MODE == "ping-crash":
                signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
            if target == "system" and MODE == "ping-garbage":
                sock.sendall(frame(REPLY, id, b"\x06\x00\x00\x00\x07garbage"))
                continue
            if target == "system" and MODE == "ping-refused":
                sock.sendall(frame(ERROR, id, struct.pack(">I", 21) + b"no object named system"))
                continue
            if target == "system" and MODE == "typed-sloppy":
                sock.sendall(frame(REPLY, id, ping_argument(payload)))
                continue
            if MODE == "crash":
                # To this thread, as a real fault would be: a SIGSEGV sent to the process (os.kill)
                # goes to any thread and, being a core-dumping signal, lets this one run on and
                # send the reply before the process dies.
                signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
            if MODE == "forbidden":
                import ctypes
                ctypes.CDLL(None).ptrace(0, 0, 0, 0)  # PTRACE_TRACEME
            sock.sendall(frame(REPLY, id, payload))
    except (EOFError, OSError):
        pass
    finally:
        sock.close()


control = socket.socket(fileno=3)
control.sendall(frame(READY, 0, (os.environ["EXTSANDBOX_EXTENSION_IDENTIFIER"] + (".other" if MODE == "wrong-ready" else "")).encode()))
while True:
    try:
        kind, id, payload, fds = read_frame(control)
    except EOFError:
        os._exit(0)  # the host is gone
    if kind == CONNECT and len(fds) == 1:
        threading.Thread(target=serve, args=(socket.socket(fileno=fds[0]),), daemon=True).start()
    elif kind == GOODBYE and MODE != "lingers":
        control.sendall(frame(GOODBYE))
        os._exit(0)
