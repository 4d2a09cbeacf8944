#!/usr/bin/env python3
"""A minimal host in Python, to try extension.py from a shell: python3 try_host.py"""
import socket, struct, subprocess
H = struct.Struct(">IBBHIQ")
host, ext = socket.socketpair()
proc = subprocess.Popen(["sh", "-c", f"exec python3 extension.py 3<&{ext.fileno()}"],
                        pass_fds=[ext.fileno()])             # fd 3 in the child = ext
ext.close()
def frame(kind, ident=0, payload=b""):
    return H.pack(16 + len(payload), kind, 0, 0, 0, ident) + payload
print(host.recv(4096))                                   # READY
conn, theirs = socket.socketpair()
socket.send_fds(host, [H.pack(16, 8, 0, 1, 0, 1)], [theirs.fileno()])   # CONNECT id 1
theirs.close()
conn.sendall(frame(1, 0, struct.pack(">HI", 1, 16 << 20) + b"shell"))  # HELLO
print(conn.recv(4096))                                   # the extension's HELLO
conn.sendall(frame(2, 1, b"hello"))                     # REQUEST id 1
print(conn.recv(4096))                                   # REPLY id 1 "hello"
host.sendall(frame(7))                                   # GOODBYE: the extension exits
print(proc.wait())
