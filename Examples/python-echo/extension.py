#!/usr/bin/env python3
"""An extsandbox extension in plain Python (standard library only, Python 3.9+).

It implements docs/wire-protocol.md from the document alone:

- fd 3 is the control socket. The extension sends READY, then receives one CONNECT per new
  connection; each CONNECT carries the connection's socket as its single fd.
- On each connection the host sends HELLO first; the extension answers with its own HELLO, or with
  ERROR 1 (rejected) when the host's HELLO names the connection "reject-me" (then closes), or with
  ERROR 4 (protocol error) when the version is not 1.
- REQUEST payloads are echoed back as REPLY, except:
    b"memfd:..."  with one fd attached: replies with the fd's size in bytes, as ASCII digits;
    b"hold:..."   is not answered until the host CANCELs it (then ERROR 3 cancelled);
    b"count"      replies with the number of ONEWAY messages received so far, as ASCII digits;
    b"fail:..."   replies ERROR 100 (application-defined) with the rest as the message.
- ONEWAY messages are counted; CANCEL of an unknown (already answered) request is ignored;
  GOODBYE closes the connection. GOODBYE (or end of stream) on the control socket ends the process.

Each connection runs in its own thread; one lock per socket serializes writes.
"""

import os
import socket
import struct
import sys
import threading

VERSION = 1
MAX_FRAME = 16 * 1024 * 1024          # what we accept; advertised in our HELLO
MIN_MAX_FRAME = 4096
MAX_FDS = 16
HEADER = struct.Struct(">IBBHIQ")     # length, kind, flags, fdCount, reserved, id: 20 bytes

HELLO, REQUEST, REPLY, ERROR, ONEWAY, CANCEL, GOODBYE, CONNECT, READY = range(1, 10)
E_REJECTED, E_UNKNOWN_REQUEST, E_CANCELLED, E_PROTOCOL, E_INTERNAL, E_TOO_LARGE = range(1, 7)

# The host says who we are launched as; READY must carry it (docs/wire-protocol.md §7).
IDENTIFIER = os.environ.get("EXTSANDBOX_EXTENSION_IDENTIFIER", "com.example.python-echo")


class ProtocolError(Exception):
    pass


def log(*args):
    print("[python-echo]", *args, file=sys.stderr, flush=True)


class Conn:
    """Frames over one stream socket. Reads exactly one frame at a time, so every fd received
    while reading a frame belongs to that frame (fds travel with a frame's first byte)."""

    def __init__(self, sock):
        self.sock = sock
        self.peer_max = MAX_FRAME     # until the peer's HELLO says otherwise
        self.lock = threading.Lock()

    def _recv_exact(self, n, fds, at_boundary):
        data = bytearray()
        while len(data) < n:
            chunk, new_fds, flags, _ = socket.recv_fds(
                self.sock, n - len(data), MAX_FDS, socket.MSG_CMSG_CLOEXEC)
            fds.extend(new_fds)
            if flags & socket.MSG_CTRUNC:
                raise ProtocolError("ancillary data truncated (MSG_CTRUNC)")
            if not chunk:
                if at_boundary and not data and not fds:
                    return None                     # clean end of stream
                raise ProtocolError("truncated frame at end of stream")
            data += chunk
            at_boundary = False
        return bytes(data)

    def receive(self):
        """Returns (kind, id, payload, fds) or None at end of stream."""
        fds = []
        try:
            head = self._recv_exact(HEADER.size, fds, True)
            if head is None:
                return None
            length, kind, flags, fd_count, reserved, ident = HEADER.unpack(head)
            if length < 16:
                raise ProtocolError(f"frame length {length} < 16")
            if length > MAX_FRAME:
                raise ProtocolError(f"frame length {length} > our maximum {MAX_FRAME}")
            if not HELLO <= kind <= READY:
                raise ProtocolError(f"unknown kind {kind}")
            if flags != 0 or reserved != 0:
                raise ProtocolError("unknown flags or nonzero reserved field")
            if fd_count > MAX_FDS:
                raise ProtocolError(f"{fd_count} fds declared")
            payload = self._recv_exact(length - 16, fds, False) if length > 16 else b""
            if len(fds) != fd_count:
                raise ProtocolError(f"{fd_count} fds declared, {len(fds)} received")
            return kind, ident, payload, fds
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def send(self, kind, ident=0, payload=b"", fds=()):
        if 16 + len(payload) > self.peer_max:
            raise ProtocolError("frame exceeds the peer's maximum")
        data = HEADER.pack(16 + len(payload), kind, 0, len(fds), 0, ident) + payload
        with self.lock:
            # The fds go with the sendmsg that carries the frame's first byte; the rest follows.
            sent = socket.send_fds(self.sock, [data], list(fds)) if fds else self.sock.send(data)
            if sent < len(data):
                self.sock.sendall(data[sent:])

    def send_error(self, ident, code, message):
        self.send(ERROR, ident, struct.pack(">I", code) + message.encode())


def serve_connection(conn_id, sock):
    conn = Conn(sock)
    try:
        first = conn.receive()
        if first is None:
            return
        kind, _, payload, fds = first
        for fd in fds:
            os.close(fd)
        if kind != HELLO or len(payload) < 6:
            conn.send_error(0, E_PROTOCOL, "expected HELLO")
            return
        version, peer_max = struct.unpack(">HI", payload[:6])
        try:
            name = payload[6:].decode()
        except UnicodeDecodeError:
            conn.send_error(0, E_PROTOCOL, "HELLO name is not UTF-8")
            return
        if version != VERSION:
            conn.send_error(0, E_PROTOCOL, f"unsupported protocol version {version}")
            return
        if peer_max < MIN_MAX_FRAME:
            conn.send_error(0, E_PROTOCOL, "maximum frame size below 4096")
            return
        conn.peer_max = peer_max
        if name == "reject-me":
            conn.send_error(0, E_REJECTED, f"connection {conn_id} rejected")
            return
        conn.send(HELLO, 0, struct.pack(">HI", VERSION, MAX_FRAME) + IDENTIFIER.encode())

        oneways = 0
        held = set()                                 # requests waiting for a CANCEL
        while True:
            frame = conn.receive()
            if frame is None:
                return
            kind, ident, payload, fds = frame
            if kind == REQUEST:
                try:
                    if payload.startswith(b"memfd:"):
                        if len(fds) != 1:
                            conn.send_error(ident, E_INTERNAL, "memfd: needs exactly one fd")
                        else:
                            conn.send(REPLY, ident, str(os.fstat(fds[0]).st_size).encode())
                    elif payload.startswith(b"hold:"):
                        held.add(ident)
                    elif payload == b"count":
                        conn.send(REPLY, ident, str(oneways).encode())
                    elif payload.startswith(b"fail:"):
                        conn.send_error(ident, 100, payload[5:].decode(errors="replace"))
                    else:
                        conn.send(REPLY, ident, payload)
                finally:
                    for fd in fds:
                        os.close(fd)
            elif kind == ONEWAY:
                oneways += 1
                for fd in fds:
                    os.close(fd)
            elif kind == CANCEL:
                if ident in held:                    # unknown ids: already answered, ignore
                    held.discard(ident)
                    conn.send_error(ident, E_CANCELLED, "cancelled")
            elif kind == GOODBYE:
                return
            else:
                for fd in fds:
                    os.close(fd)
                conn.send_error(0, E_PROTOCOL, f"unexpected frame kind {kind}")
                return
    except ProtocolError as error:
        log(f"connection {conn_id}: protocol error: {error}")
        try:
            conn.send_error(0, E_PROTOCOL, str(error))
        except OSError:
            pass
    except OSError as error:
        log(f"connection {conn_id}: {error}")
    finally:
        sock.close()


def main():
    control = Conn(socket.socket(fileno=3))
    control.send(READY, 0, IDENTIFIER.encode())
    while True:
        frame = control.receive()
        if frame is None:
            break
        kind, ident, payload, fds = frame
        if kind == CONNECT and len(fds) == 1:
            sock = socket.socket(fileno=fds[0])
            threading.Thread(target=serve_connection, args=(ident, sock), daemon=True).start()
        elif kind == GOODBYE:
            control.send(GOODBYE)                    # acknowledge, then exit
            break
        else:
            for fd in fds:
                os.close(fd)
            raise ProtocolError(f"unexpected frame kind {kind} on the control socket")


if __name__ == "__main__":
    try:
        main()
    except (ProtocolError, OSError) as error:
        log(f"control socket: {error}")
        sys.exit(1)
