#!/usr/bin/env python3
"""An extsandbox extension in plain Python that serves one distributed method.

It implements, from docs/wire-protocol.md alone (§1-§7 for frames, §12 for calls), the method
`apply(_:options:)` of the `TextFilter` contract of Tests/Fixtures/xsb-actors-contract:

    @Resolvable
    public protocol TextFilter: DistributedActor where ActorSystem == ExtensionActorSystem {
        distributed func apply(_ text: String, options: FilterOptions) async throws -> String
    }
    public struct FilterOptions: Codable { public var shout: Bool; public var limit: Int? }
    public enum FilterError: Error, Codable { case tooLong(limit: Int) }   // registered as "FilterError"

A Swift host calls it through `connection.remoteObject($TextFilter.self)`. It also serves the
system target every implementation serves (§12.4: `ping` echoes its argument), which
`extsandbox test` calls. Every other method is answered ERROR 22 (unknown method), another target
ERROR 21, a malformed envelope ERROR 20.
Standard library only (Python 3.9+); one thread per connection.
"""

import os
import socket
import struct
import threading

HEADER = struct.Struct(">IBBHIQ")      # length, kind, flags, fdCount, reserved, id
HELLO, REQUEST, REPLY, ERROR, ONEWAY, CANCEL, GOODBYE, CONNECT, READY = range(1, 10)
MAX_FRAME = 1 << 20
IDENTIFIER = os.environ.get("EXTSANDBOX_EXTENSION_IDENTIFIER", "com.example.python-textfilter")

# The method identifier of TextFilter.apply(_:options:) (docs/wire-protocol.md §12.1).
APPLY = "$s18TextFilterContract01$aB0C5apply_7optionsS2S_AA0B7OptionsVtYaKFTE"


class Malformed(Exception):
    pass


class Reader:
    """Big-endian fields of untrusted bytes, each length checked against what remains."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if n > len(self.data) - self.at:
            raise Malformed(f"{n} bytes needed, {len(self.data) - self.at} remain")
        self.at += n
        return self.data[self.at - n:self.at]

    def uint(self, size):
        return int.from_bytes(self.take(size), "big")

    def text(self, size):
        return self.take(self.uint(size)).decode()


def read_value(r, depth=0):
    """A value (§12.2) as Python: None, bool, int, float, str, bytes, list, dict."""
    tag = r.uint(1)
    if tag == 0:
        return None
    if tag in (1, 2):
        return tag == 2
    if tag == 3:
        return int.from_bytes(r.take(8), "big", signed=True)
    if tag == 4:
        return r.uint(8)
    if tag == 5:
        return struct.unpack(">d", r.take(8))[0]
    if tag == 6:
        return r.text(4)
    if tag == 7:
        return r.take(r.uint(4))
    if tag in (8, 9) and depth < 64:
        count = r.uint(4)
        if tag == 8:
            return [read_value(r, depth + 1) for _ in range(count)]
        return {r.text(4): read_value(r, depth + 1) for _ in range(count)}
    raise Malformed(f"value tag {tag}")


def write_value(value):
    if value is None:
        return b"\x00"
    if isinstance(value, bool):
        return b"\x02" if value else b"\x01"
    if isinstance(value, int):
        return b"\x03" + value.to_bytes(8, "big", signed=True)
    if isinstance(value, str):
        data = value.encode()
        return b"\x06" + struct.pack(">I", len(data)) + data
    if isinstance(value, dict):
        out = b"\x09" + struct.pack(">I", len(value))
        for key, item in value.items():
            out += struct.pack(">I", len(key.encode())) + key.encode() + write_value(item)
        return out
    raise TypeError(type(value))


def read_envelope(payload):
    """(target, method, [argument bytes]) of a call envelope (§12.1)."""
    r = Reader(payload)
    if r.uint(1) != 1 or r.uint(1) != 0:
        raise Malformed("version or flags")
    target, method = r.text(2), r.text(2)
    arguments = [r.take(r.uint(4)) for _ in range(r.uint(2))]
    if r.at != len(payload):
        raise Malformed("bytes after the last argument")
    return target, method, arguments


def call(payload):
    """The answer to one call: ("reply", bytes) or ("error", code, message)."""
    try:
        target, method, arguments = read_envelope(payload)
    except (Malformed, UnicodeDecodeError) as error:
        return ("error", 20, str(error))
    if target == "system":                  # §12.4: every implementation serves it
        if method != "ping":
            return ("error", 22, f"the system target has no method {method}")
        if len(arguments) != 1:
            return ("error", 23, f"{len(arguments)} arguments for ping, which takes 1")
        return ("reply", arguments[0])
    if target != "extension":
        return ("error", 21, f"no object named {target}")
    if method != APPLY:
        return ("error", 22, f"no method {method}")
    try:
        if len(arguments) != 2:
            raise Malformed(f"{len(arguments)} arguments for 2")
        text, options = (read_value(Reader(argument)) for argument in arguments)
        if not isinstance(text, str) or not isinstance(options, dict) or not isinstance(options.get("shout"), bool):
            raise Malformed("apply takes a string and FilterOptions")
    except (Malformed, UnicodeDecodeError) as error:
        return ("error", 23, str(error))
    limit = options.get("limit")
    if isinstance(limit, int) and len(text) > limit:
        error = write_value({"tooLong": {"limit": limit}})
        return ("error", 24, "FilterError\n" + error.hex())
    return ("reply", write_value(text.upper() if options["shout"] else text))


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk, fds, _, _ = socket.recv_fds(sock, n - len(data), 16)
        for fd in fds:              # calls of apply carry none: close what comes
            os.close(fd)
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(sock):
    length, kind, _, _, _, ident = HEADER.unpack(read_exact(sock, HEADER.size))
    if not 16 <= length <= MAX_FRAME:
        raise EOFError
    return kind, ident, read_exact(sock, length - 16)


def frame(kind, ident=0, payload=b""):
    return HEADER.pack(16 + len(payload), kind, 0, 0, 0, ident) + payload


def serve(sock):
    lock = threading.Lock()
    try:
        kind, _, hello = read_frame(sock)
        if kind != HELLO or hello[:2] != b"\x00\x01":
            return
        sock.sendall(frame(HELLO, 0, struct.pack(">HI", 1, MAX_FRAME) + IDENTIFIER.encode()))
        while True:
            kind, ident, payload = read_frame(sock)
            if kind == GOODBYE:
                return
            if kind != REQUEST:
                continue                    # CANCEL: apply never waits; ONEWAY: dropped
            answer = call(payload)
            with lock:
                if answer[0] == "reply":
                    sock.sendall(frame(REPLY, ident, answer[1]))
                else:
                    sock.sendall(frame(ERROR, ident, struct.pack(">I", answer[1]) + answer[2].encode()))
    except (EOFError, OSError):
        pass
    finally:
        sock.close()


control = socket.socket(fileno=3)
control.sendall(frame(READY, 0, IDENTIFIER.encode()))
while True:
    message, fds, _, _ = socket.recv_fds(control, HEADER.size, 1)
    if not message:
        os._exit(0)
    if len(message) < HEADER.size:
        message += read_exact(control, HEADER.size - len(message))
    if message[4] == GOODBYE:
        control.sendall(frame(GOODBYE))
        os._exit(0)
    for fd in fds:
        threading.Thread(target=serve, args=(socket.socket(fileno=fd),), daemon=True).start()
