# Test fixture (run as `python3 -c`): an extension that speaks the wire protocol
# (docs/wire-protocol.md) but calls its host with malformed call envelopes (§12; one carries two
# fds the host must close), answers its
# host's calls with the ERROR codes it got, then with a result that is no value, then with a
# REPLY for a request nobody sent.
import os, socket, struct, threading

def frame(kind, id=0, payload=b""):
    return struct.pack(">IBBHIQ", 16 + len(payload), kind, 0, 0, 0, id) + payload

def read_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data

def read_frame(s):
    (length,) = struct.unpack(">I", read_exact(s, 4))
    kind, _, _, _, id = struct.unpack(">BBHIQ", read_exact(s, 16))
    return kind, id, read_exact(s, length - 16)

def string_value(text):
    data = text.encode()
    return b"\x06" + struct.pack(">I", len(data)) + data

def envelope(target, method, arguments, count=None):
    t, m = target.encode(), method.encode()
    data = struct.pack(">BBH", 1, 0, len(t)) + t + struct.pack(">H", len(m)) + m
    data += struct.pack(">H", len(arguments) if count is None else count)
    for argument in arguments:
        data += struct.pack(">I", len(argument)) + argument
    return data

NOTE = "$s18TextFilterContract10$HostNotesC4noteyS2SYaKFTE"
GARBAGE = [
    b"",                                                            # 20: empty
    b"\x02\x00",                                                    # 20: version 2
    envelope("nobody", NOTE, [string_value("x")]),                  # 21: no such object
    envelope("host", "$sGarbageTE", [string_value("x")]),           # 22: no such method
    envelope("host", NOTE, [b"\x2a"]),                              # 23: unknown value tag
    envelope("host", NOTE, []),                                     # 23: an argument missing
    envelope("host", NOTE, [], count=0xffff),                       # 20: a count that lies
    envelope("host", NOTE, [b"\x08\x00\x00\x00\x01" * 100 + b"\x00"]),  # 23: nested too deep
    envelope("host", NOTE, [string_value("valid")]),                # a valid call: answered
    b"\x01\x00\x00",                                             # 20: truncated, with two fds
]
WITH_FDS = len(GARBAGE) - 1

def serve(s):
    read_frame(s)
    s.sendall(frame(1, 0, struct.pack(">HI", 1, 1 << 20)))
    for index, payload in enumerate(GARBAGE):
        if index == WITH_FDS:
            ends = os.pipe()
            data = struct.pack(">IBBHIQ", 16 + len(payload), 2, 0, 2, 0, 1000 + index) + payload
            socket.send_fds(s, [data], list(ends))
            for end in ends:
                os.close(end)
        else:
            s.sendall(frame(2, 1000 + index, payload))
    answers, calls, waiting = {}, 0, None
    while True:
        kind, id, payload = read_frame(s)
        if kind in (3, 4) and id >= 1000:
            answers[id] = str(struct.unpack(">I", payload[:4])[0]) if kind == 4 else "reply"
        elif kind == 2:
            calls += 1
            if calls == 1:
                waiting = id
            elif calls == 2:
                s.sendall(frame(3, id, b"\xff\x00not a value"))
            else:
                s.sendall(frame(3, 999999, string_value("nobody asked")))
        if waiting is not None and len(answers) == len(GARBAGE):
            codes = ",".join(answers[1000 + index] for index in range(len(GARBAGE)))
            s.sendall(frame(3, waiting, string_value(codes)))
            waiting = None

control = socket.socket(fileno=3)
control.sendall(frame(9, 0, os.environ["EXTSANDBOX_EXTENSION_IDENTIFIER"].encode()))
while True:
    msg, fds, _, _ = socket.recv_fds(control, 20, 1)
    if not msg:
        os._exit(0)
    for fd in fds:
        threading.Thread(target=serve, args=(socket.socket(fileno=fd),), daemon=True).start()
