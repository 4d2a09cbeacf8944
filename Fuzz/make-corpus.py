#!/usr/bin/env python3
"""Writes the seed corpora under Fuzz/corpus/ (except policy-cache, whose entries the test
suite writes: XSB_WRITE_FUZZ_SEEDS=1 scripts/test --filter FuzzCorpusTests).

Seeds come from the repository's own inputs: the shipped policies, the policy text and Docker
profiles of the tests, and frames in the shapes docs/wire-protocol.md describes.
Run from anywhere: python3 Fuzz/make-corpus.py (it replaces the generated files)."""
import glob, hashlib, json, os, re, struct

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
corpus = os.path.join(root, "Fuzz", "corpus")

def write(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def swift_strings(path):
    """The multi-line string literals of a Swift file, without interpolations, dedented."""
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r'"""\n(.*?)\n([ ]*)"""', text, re.S):
        body, indent = m.group(1), len(m.group(2))
        if "\\(" in body:
            continue
        lines = [l[indent:] if l.startswith(" " * indent) else l.lstrip() for l in body.split("\n")]
        yield "\n".join(lines).replace('\\"', '"').replace("\\\\", "\\") + "\n"

# --- frames ---------------------------------------------------------------------------------
HELLO, REQUEST, REPLY, ERROR, ONEWAY, CANCEL, GOODBYE, CONNECT, READY = range(1, 10)

def frame(kind, id=0, payload=b"", fds=0, flags=0, reserved=0, length=None):
    if length is None:
        length = 16 + len(payload)
    return struct.pack(">IBBHIQ", length, kind, flags, fds, reserved, id) + payload

def hello(version=1, maximum=16 << 20, name=b""):
    return struct.pack(">HI", version, maximum) + name

def error(code, message=b""):
    return struct.pack(">I", code) + message

# control bytes: max-size selector (255 = default), chunk seed, fd seed
frames = {
    "hello": frame(HELLO, payload=hello(name=b"host")),
    "hello-noname": frame(HELLO, payload=hello()),
    "hello-v2": frame(HELLO, payload=hello(version=2, maximum=4096, name=b"ext.example")),
    "handshake": frame(HELLO, payload=hello(name=b"host")) + frame(HELLO, payload=hello(name=b"com.example.upcase")),
    "rejected": frame(HELLO, payload=hello()) + frame(ERROR, payload=error(1, b"not allowed")),
    "request-reply": frame(REQUEST, 1, b"hello") + frame(REPLY, 1, b"HELLO"),
    "request-error": frame(REQUEST, 7, b"x" * 40) + frame(ERROR, 7, error(2, b"unknown request")),
    "oneway": frame(ONEWAY, payload=b"note"),
    "cancel": frame(REQUEST, 3, b"slow") + frame(CANCEL, 3) + frame(ERROR, 3, error(3)),
    "goodbye": frame(GOODBYE),
    "connect": frame(CONNECT, 5, fds=1),
    "ready": frame(READY, payload=b"com.example.echo"),
    "request-fds": frame(REQUEST, 9, b"fd", fds=2),
    "reply-16fds": frame(REPLY, 9, b"", fds=16),
    "too-many-fds": frame(REQUEST, 9, b"", fds=17),
    "empty-request": frame(REQUEST, 1),
    "big-payload": frame(ONEWAY, payload=bytes(range(256)) * 8),
    "conversation": b"".join([frame(HELLO, payload=hello()), frame(REQUEST, 1, b"a"), frame(REQUEST, 2, b"bb", fds=1),
                              frame(REPLY, 2, b"c"), frame(REPLY, 1, b""), frame(ONEWAY, payload=b"z"), frame(GOODBYE)]),
    "truncated-header": frame(REQUEST, 1, b"abc")[:11],
    "truncated-payload": frame(REQUEST, 1, b"abcdef")[:23],
    "too-short": frame(REQUEST, 1, length=15),
    "too-large": frame(ONEWAY, length=0xffffffff),
    "unknown-kind": frame(42),
    "flags": frame(ONEWAY, flags=1),
    "reserved": frame(ONEWAY, reserved=7),
    "zero-id-request": frame(REQUEST, 0),
    "id-on-hello": frame(HELLO, 4, hello()),
    "connect-no-fd": frame(CONNECT, 5),
    "error-short": frame(ERROR, payload=b"\0\0"),
    "hello-bad-utf8": frame(HELLO, payload=hello(name=b"\xff\xfe")),
}
for i, (name, stream) in enumerate(sorted(frames.items())):
    selector = 255 if i % 3 else 64
    write("frame-decoder", name, bytes([selector, i * 37 % 256, i * 91 % 256]) + stream)

# --- payloads --------------------------------------------------------------------------------
payloads = {
    "hello": hello(), "hello-name": hello(name=b"host"), "hello-utf8": hello(name="ünïcödé".encode()),
    "hello-min": hello(maximum=4096), "hello-below-min": hello(maximum=4095), "hello-v0": hello(version=0),
    "hello-short": hello()[:5], "hello-bad-utf8": hello(name=b"a\xc3"),
    "error": error(4, b"protocol error"), "error-empty": error(1), "error-app": error(100, b"x"),
    "error-short": b"\0\0\1", "error-bad-utf8": error(5, b"\xed\xa0\x80"),
    "header-request": frame(REQUEST, 1, b"p"), "header-connect": frame(CONNECT, 2, fds=1),
    "header-bad-kind": frame(0), "header-too-large": frame(ONEWAY, length=(16 << 20) + 1),
    "empty": b"",
}
for name, data in payloads.items():
    write("payloads", name, data)

# --- policies --------------------------------------------------------------------------------
n = 0
for path in sorted(glob.glob(os.path.join(root, "Policies", "*.yaml"))):
    write("policy-yaml", "shipped-" + os.path.basename(path), open(path, "rb").read())
for path in sorted(glob.glob(os.path.join(root, "Tests", "SandboxPolicyTests", "*.swift"))):
    for text in swift_strings(path):
        if text.lstrip().startswith("{"):
            continue  # JSON: a Docker profile
        write("policy-yaml", "test-%s" % hashlib.sha1(text.encode()).hexdigest()[:12], text)
        n += 1

# --- Docker profiles ---------------------------------------------------------------------------
for path in sorted(glob.glob(os.path.join(root, "Tests", "SandboxPolicyTests", "*.swift"))):
    for text in swift_strings(path):
        if text.lstrip().startswith("{"):
            write("docker-import", "test-%s" % hashlib.sha1(text.encode()).hexdigest()[:12], text)
# The profile fixture written for the tests (no third-party profile is checked in).
fixture = os.path.join(root, "Tests", "Fixtures", "docker-seccomp", "containers-style.json")
write("docker-import", "fixture-containers-style.json", open(fixture, "rb").read())
profiles = {
    "several-actions": {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38, "syscalls": [
        {"names": ["execve", "exit_group"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": 22, "args": [
            {"index": 0, "value": 16, "op": "SCMP_CMP_EQ"}, {"index": 2, "value": 9, "op": "SCMP_CMP_EQ"}]},
        {"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 2, "value": 9, "op": "SCMP_CMP_NE"}]},
        {"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 16, "op": "SCMP_CMP_NE"}]},
        {"names": ["socket"], "action": "SCMP_ACT_KILL", "args": [{"index": 0, "value": 17, "op": "SCMP_CMP_EQ"}]}]},
    "minimal": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "write", "exit_group", "execve"], "action": "SCMP_ACT_ALLOW"}]},
    "old-name": {"defaultAction": "SCMP_ACT_KILL", "syscalls": [{"name": "read", "action": "SCMP_ACT_ALLOW"}]},
    "log": {"defaultAction": "SCMP_ACT_LOG", "syscalls": []},
    "trap": {"defaultAction": "SCMP_ACT_TRAP", "defaultErrnoRet": 38, "syscalls": [{"names": ["open"], "action": "SCMP_ACT_TRACE"}]},
    "args": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [
            {"index": 1, "value": 21505, "op": "SCMP_CMP_EQ"}, {"index": 2, "value": 0, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
        {"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": [
            {"index": 0, "value": 1, "op": "SCMP_CMP_LT"}, {"index": 0, "value": 5, "op": "SCMP_CMP_GE"}]},
        {"names": ["mmap"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 5, "value": 18446744073709551615, "op": "SCMP_CMP_LE"}]}]},
    "flags": {"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_LOG"], "listenerPath": "/run/x.sock",
              "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"], "syscalls": [{"names": ["reboot"], "action": "SCMP_ACT_KILL_THREAD"}]},
    "injection": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["read\nversion: 2", "write"], "action": "SCMP_ACT_ALLOW", "comment": "a\n  allow: [ptrace]\n#"}]},
    "not-object": [1, 2, 3],
}
for name, profile in profiles.items():
    write("docker-import", name, json.dumps(profile, indent=1))

# --- bundle manifests and point declarations (docs/extensions.md) ----------------------------
manifests = {
    "manifest-good": 'schema: 1\nidentifier: org.example.upcase\nname: Upcase\nversion: "1.0"\npoint: org.example.text\nexecutable: bin/tool\nresources: [share/words.txt]\n',
    "manifest-link-inside": "schema: 1\nidentifier: org.example.a\nname: A\nversion: 1\npoint: org.example.p\nexecutable: tool-link\n",
    "manifest-link-out": "schema: 1\nidentifier: org.example.a\nname: A\nversion: 1\npoint: org.example.p\nexecutable: bin/tool\nresources:\n  - out/passwd\n",
    "manifest-dotdot": "schema: 1\nidentifier: org.example.a\nname: A\nversion: 1\npoint: org.example.p\nexecutable: bin/../bin/tool\n",
    "manifest-absolute": "schema: 1\nidentifier: org.example.a\nname: A\nversion: 1\npoint: org.example.p\nexecutable: /bin/sh\n",
    "manifest-unknown-field": "schema: 1\nidentifier: org.example.x\nname: X\nversion: 1\npoint: org.example.p\nexecutable: run\ncolour: red\n",
    "manifest-bad-yaml": "schema: 1\nidentifier: [oops\n",
    "manifest-schema2": "schema: 2\nidentifier: org.example.x\n",
    "manifest-flow": '{schema: 1, identifier: org.example.f, name: "F", version: "2", point: org.example.p, executable: "bin/tool", resources: ["share/words.txt", "bin"]}\n',
    "declaration-good": '# Generated by extsandbox\nschema: 1\nhost: "org.example.host"\nbundle: "/opt/host.app"\npoints:\n  - name: "org.example.text"\n    user-interface: false\n    scope: application\n    security-level: "hardened"\n  - name: "org.example.open"\n    scope: none\n',
    "declaration-twice": "schema: 1\nhost: org.example.host\npoints:\n  - name: org.example.p\n  - name: org.example.p\n",
    "declaration-bad-scope": "schema: 1\nhost: org.example.host\npoints:\n  - name: org.example.p\n    scope: world\n",
    "declaration-relative-bundle": "schema: 1\nhost: org.example.host\nbundle: host.app\npoints: []\n",
    "declaration-quoted": 'schema: 1\nhost: "org.example.h\\u0041"\npoints:\n  - {name: "org.example.q", security-level: "a\\"b\\n", user-interface: true}\n',
}
for name, text in manifests.items():
    write("bundle-manifest", name, text)

# --- distributed call envelopes and values (docs/wire-protocol.md §12) ----------------------
def value(tag, body=b""):
    return bytes([tag]) + body

def string_value(text):
    data = text.encode()
    return value(6, struct.pack(">I", len(data)) + data)

def map_value(entries):
    out = value(9, struct.pack(">I", len(entries)))
    for key, item in entries:
        out += struct.pack(">I", len(key)) + key.encode() + item
    return out

def envelope(target, method, arguments, version=1, flags=0, count=None):
    t, m = target.encode(), method.encode()
    out = struct.pack(">BBH", version, flags, len(t)) + t + struct.pack(">H", len(m)) + m
    out += struct.pack(">H", len(arguments) if count is None else count)
    for argument in arguments:
        out += struct.pack(">I", len(argument)) + argument
    return out

APPLY = "$s18TextFilterContract01$aB0C5apply_7optionsS2S_AA0B7OptionsVtYaKFTE"
options = map_value([("shout", value(2)), ("limit", value(3, struct.pack(">q", 3))), ("tags", value(8, struct.pack(">I", 1)) + string_value("a"))])
envelopes = {
    "apply": envelope("extension", APPLY, [string_value("hello"), options]),
    "doc-example": envelope("extension", "$s4Demo11$TextFilterC5applyyS2SYaKFTE", [string_value("hi")]),
    "no-arguments": envelope("host", "$s18TextFilterContract10$HostNotesC4noteyS2SYaKFTE", []),
    "bytes": envelope("extension", APPLY, [value(7, struct.pack(">I", 4) + b"\x00\x01\xfe\xff")]),
    "descriptor": envelope("extension", APPLY, [value(10, struct.pack(">H", 0))]),
    "enum-payload": envelope("host", "m", [map_value([("tooLong", map_value([("limit", value(4, struct.pack(">Q", 7)))]))])]),
    "nested": envelope("host", "m", [value(8, struct.pack(">I", 1)) * 40 + value(0)]),
    "lying-count": envelope("host", "m", [value(8, struct.pack(">I", 0xffffffff))]),
    "version-2": envelope("host", "m", [], version=2),
    "count-too-large": envelope("host", "m", [], count=0xffff),
    "value-double": value(5, struct.pack(">d", 1.5)),
    "value-null": value(0),
}
for name, data in envelopes.items():
    write("call-envelope", name, data)
