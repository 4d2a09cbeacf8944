import Glibc
import Testing
@testable import SandboxPolicy
import TestSupport

/// A broken policy and the one problem expected in it.
struct Broken: Sendable, CustomTestStringConvertible {
    var label: String
    var yaml: String
    var line: Int
    var column: Int?
    var message: String
    var testDescription: String { label }
}

private let header = """
    version: 1
    seccomp:
      default: kill
    """

@Suite("Broken policies", .offThePool)
struct BrokenPolicyTests {
    static let cases: [Broken] = [
        Broken(label: "YAML syntax error", yaml: """
            version: 1
            seccomp:
              default: kill
              allow: [read, write
            """, line: 5, message: "YAML syntax error: did not find expected ',' or ']'"),
        Broken(label: "YAML alias", yaml: header + "\n  allow: &io [read]\n  log: *io\n", line: 1, column: 1,
               message: "YAML aliases (*name) are not supported in policy files; write the values out"),
        Broken(label: "two YAML documents", yaml: header + "\n---\nversion: 1\n", line: 4, column: 1,
               message: "YAML syntax error: a policy file holds one YAML document, found a second one (---)"),
        Broken(label: "nesting too deep", yaml: header + "\n  allow: " + String(repeating: "[", count: 200) + "\n", line: 4,
               message: "YAML syntax error: nested more than 64 levels deep"),
        Broken(label: "NUL byte", yaml: header + "\n  allow: [read\u{0}]\n", line: 4, column: 15,
               message: "YAML syntax error: control characters are not allowed"),
        Broken(label: "escaped NUL in a value", yaml: minimalPolicy + "\nenvironment: { set: { A: \"x\\0y\" } }\n", line: 5,
               message: "contains a NUL character"),
        Broken(label: "tab indentation", yaml: "version: 1\nseccomp:\n\tdefault: kill\n", line: 3,
               message: "YAML syntax error"),
        Broken(label: "unknown top-level key", yaml: """
            version: 1
            secomp:
              default: kill
            """, line: 2, column: 1, message: "unknown key \"secomp\" in the policy; did you mean \"seccomp\"?"),
        Broken(label: "unknown key in seccomp", yaml: header + "\n  alow: [read]\n", line: 4, column: 3,
               message: "unknown key \"alow\" in seccomp; did you mean \"allow\"?"),
        Broken(label: "unknown syscall", yaml: header + "\n  allow:\n    - \"@default\"\n    - opnat\n", line: 6, column: 7,
               message: "unknown system call \"opnat\"; did you mean \"openat\"?"),
        Broken(label: "syscall of another architecture", yaml: header + "\n  allow: [\"@default\", mmap2]\n", line: 4,
               column: 23, message: "\"mmap2\" is not a system call on x86_64"),
        Broken(label: "unknown group", yaml: header + "\n  allow: [\"@default\", \"@file-sytem\"]\n", line: 4, column: 24,
               message: "unknown syscall group \"@file-sytem\"; did you mean \"@file-system\"?"),
        Broken(label: "unknown errno", yaml: header + "\n  allow: [\"@default\"]\n  errno: { EPREM: [chmod] }\n", line: 5,
               column: 12, message: "unknown errno \"EPREM\"; did you mean \"EPERM\"?"),
        Broken(label: "unknown errno in an action", yaml: header.replacingOccurrences(of: "default: kill", with: "default: errno ENOSIS") + "\n  allow: [\"@default\"]\n",
               line: 3, column: 18, message: "unknown errno \"ENOSIS\"; did you mean \"ENOSYS\"?"),
        Broken(label: "unknown action", yaml: header.replacingOccurrences(of: "default: kill", with: "default: kil"), line: 3, column: 12,
               message: "unknown action \"kil\"; did you mean \"kill\"?"),
        Broken(label: "unknown constant", yaml: header + """

              allow: ["@default"]
              rules:
                - syscall: clone
                  action: allow
                  when: ["arg0 & CLONE_NEWUSR == 0"]
            """, line: 8, column: 22, message: "unknown constant \"CLONE_NEWUSR\"; did you mean \"CLONE_NEWUSER\"?"),
        Broken(label: "bad argument index", yaml: header + """

              allow: ["@default"]
              rules:
                - syscall: ioctl
                  action: allow
                  when: "arg6 == 1"
            """, line: 8, column: 14, message: "bad argument index \"arg6\": system calls have arguments arg0 to arg5"),
        Broken(label: "masked comparison other than ==", yaml: header + """

              allow: ["@default"]
              rules:
                - syscall: clone
                  action: allow
                  when: "arg0 & 0x80 != 0"
            """, line: 8, column: 26, message: "a masked comparison (arg & MASK) only supports \"==\""),
        Broken(label: "single = in a condition", yaml: header + """

              allow: ["@default"]
              rules:
                - { syscall: socket, action: allow, when: "arg0 = AF_UNIX" }
            """, line: 6, column: 53, message: "use \"==\" to compare, not \"=\""),
        Broken(label: "group in a rule", yaml: header + """

              allow: ["@default"]
              rules:
                - { syscall: "@mount", action: allow }
            """, line: 6, column: 18, message: "a rule names one system call, not a group"),
        Broken(label: "rule without effect", yaml: header + """

              allow: ["@system-service"]
              rules:
                - syscall: clone
                  action: allow
                  when: ["arg0 & CLONE_NEWUSER == 0"]
            """, line: 6, column: 7, message: "this rule has no effect: clone is already allowed by \"@system-service\" in allow (line 4)"),
        Broken(label: "allowing clone3", yaml: header + "\n  allow: [\"@default\", clone3]\n", line: 4, column: 23,
               message: "clone3 cannot be listed in allow: clone3 always fails with ENOSYS so that the C library falls back to clone"),
        Broken(label: "clone3 in a rule", yaml: header + "\n  allow: [\"@default\"]\n  rules:\n    - {syscall: clone3, action: allow}\n",
               line: 6, column: 7, message: "a rule cannot change clone3"),
        Broken(label: "execve not allowed", yaml: header + "\n  allow: [read, write, exit_group]\n", line: 3, column: 12,
               message: "execve must be allowed without conditions"),
        Broken(label: "execve killed explicitly", yaml: header + "\n  allow: [\"@default\"]\n  kill: [execve]\n", line: 5, column: 10,
               message: "execve must be allowed without conditions"),
        Broken(label: "execve with conditions", yaml: header + "\n  allow: [\"@default\", \"~execve\"]\n  rules:\n    - {syscall: execve, action: allow, when: \"arg2 == 0\"}\n",
               line: 6, column: 7, message: "execve must be allowed without conditions"),
        Broken(label: "wrong type: mapping for a list", yaml: header + "\n  allow: {read: yes}\n", line: 4, column: 10,
               message: "allow must be a list, found a mapping (key: value)"),
        Broken(label: "wrong type: list for a value", yaml: minimalPolicy + "\nnetwork: [none]\n", line: 5, column: 10,
               message: "network must be a single value, found a list"),
        Broken(label: "no does not become false", yaml: minimalPolicy + "\nnetwork: no\n", line: 5, column: 10,
               message: "\"no\" is not a network mode; write \"none\""),
        Broken(label: "bad tmpfs size", yaml: minimalPolicy + "\nfilesystem:\n  tmpfs: { /tmp: 256X }\n", line: 6, column: 18,
               message: "bad size \"256X\" for tmpfs /tmp; write a size like 64K, 256M or 1G"),
        Broken(label: "bad memory limit", yaml: minimalPolicy + "\nlimits:\n  memory: 1.5G\n", line: 6, column: 11,
               message: "bad value \"1.5G\" for memory"),
        Broken(label: "bad process count", yaml: minimalPolicy + "\nlimits:\n  processes: lots\n", line: 6, column: 14,
               message: "bad value \"lots\" for processes; expected a whole number, or none"),
        Broken(label: "bad memory scope", yaml: minimalPolicy + "\nlimits:\n  memory-scope: whole\n", line: 6, column: 17,
               message: "bad value \"whole\" for memory-scope; expected sandbox (the whole sandbox, through a cgroup) or per-process"),
        Broken(label: "unknown limit", yaml: minimalPolicy + "\nlimits:\n  open-file: 10\n", line: 6, column: 3,
               message: "unknown key \"open-file\" in limits; did you mean \"open-files\"?"),
        Broken(label: "relative bind path", yaml: minimalPolicy + "\nfilesystem:\n  ro-bind: [usr]\n", line: 6, column: 13,
               message: "a ro-bind path must be an absolute path, found \"usr\""),
        Broken(label: "dot-dot in a path", yaml: minimalPolicy + "\nfilesystem:\n  bind: [/tmp/../etc]\n", line: 6, column: 10,
               message: "must not contain \".\" or \"..\" components"),
        Broken(label: "mounted twice", yaml: minimalPolicy + "\nfilesystem:\n  ro-bind: [/usr]\n  bind: [/usr/]\n", line: 7, column: 10,
               message: "/usr is mounted twice (also at line 6)"),
        Broken(label: "bad environment name", yaml: minimalPolicy + "\nenvironment:\n  pass: [PATH, \"MY-VAR\"]\n", line: 6, column: 16,
               message: "\"MY-VAR\" is not an environment variable name"),
        Broken(label: "missing version", yaml: "seccomp:\n  default: kill\n  allow: [\"@default\"]\n", line: 1, column: 1,
               message: "missing required key \"version\""),
        Broken(label: "unsupported version", yaml: minimalPolicy.replacingOccurrences(of: "version: 1", with: "version: 2"), line: 1, column: 10,
               message: "unsupported policy format version \"2\""),
        Broken(label: "missing seccomp", yaml: "version: 1\n", line: 1, column: 1, message: "missing required section \"seccomp\""),
        Broken(label: "missing default", yaml: "version: 1\nseccomp:\n  allow: [\"@default\"]\n", line: 3, column: 3,
               message: "seccomp needs a \"default\" action"),
        Broken(label: "duplicate key", yaml: minimalPolicy + "\nnetwork: none\nnetwork: none\n", line: 6, column: 1,
               message: "duplicate key \"network\""),
        Broken(label: "masking the root", yaml: minimalPolicy + "\nfilesystem:\n  mask: [\"/\"]\n", line: 6, column: 10,
               message: "cannot mask \"/\""),
        Broken(label: "relative masked path", yaml: minimalPolicy + "\nfilesystem:\n  mask: [etc/shadow]\n", line: 6, column: 10,
               message: "a masked path must be an absolute path"),
        // A combining mark after a slash joins it into one character, but the kernel still reads
        // the slash: the ".." before it is a component of its own.
        Broken(label: "\"..\" before a slash that a combining mark follows", yaml: minimalPolicy + "\nfilesystem:\n  mask: [\"/etc/../\u{301}x\"]\n",
               line: 6, column: 10, message: "a masked path must not contain \".\" or \"..\" components"),
        Broken(label: "conflicting errnos", yaml: header + "\n  allow: [\"@default\"]\n  errno: { EPERM: [chmod], EACCES: [\"@file-system\"] }\n",
               line: 5, column: 38, message: "chmod would fail with errno EACCES here but with errno EPERM by \"chmod\" in errno EPERM (line 5)"),
        Broken(label: "rule missing action", yaml: header + "\n  allow: [\"@default\"]\n  rules:\n    - syscall: ioctl\n",
               line: 6, column: 7, message: "a rule needs \"action\""),
        Broken(label: "network mode not supported yet", yaml: minimalPolicy + "\nnetwork: host\n", line: 5, column: 10,
               message: "network mode \"host\" is not supported yet; the only mode is \"none\""),
        Broken(label: "memory-deny-write-execute is not a boolean", yaml: header + "\n  memory-deny-write-execute: yes\n  allow: [\"@default\"]\n",
               line: 4, column: 30, message: "memory-deny-write-execute is true or false, found \"yes\""),
        Broken(label: "exec-after-start is not a boolean", yaml: header + "\n  allow-exec-after-start: no\n  allow: [\"@default\"]\n",
               line: 4, column: 27, message: "allow-exec-after-start is true or false, found \"no\""),
        Broken(label: "execve allowed by name without exec after start", yaml: header + "\n  allow-exec-after-start: false\n  allow: [\"@default\", execveat]\n",
               line: 5, column: 23, message: "execveat cannot be listed in allow: with allow-exec-after-start: false (line 4) the supervisor decides execveat"),
        Broken(label: "rule for execve without exec after start", yaml: header + "\n  allow-exec-after-start: false\n  allow: [\"@default\"]\n  rules:\n    - {syscall: execve, action: allow, why: launch}\n",
               line: 7, column: 7, message: "a rule cannot change execve: with allow-exec-after-start: false"),
        Broken(label: "dangerous syscall by name", yaml: header + "\n  allow: [\"@default\", ptrace]\n", line: 4, column: 23,
               message: "ptrace is a dangerous system call (it reads and writes the memory and registers of other processes); to let it run, replace this entry with a rule that says why: {syscall: ptrace, action: allow, why: \"…\"}"),
        Broken(label: "dangerous syscalls by group", yaml: header + "\n  allow: [\"@default\", \"@keyring\"]\n", line: 4, column: 24,
               message: "\"@keyring\" in allow lets dangerous system calls run: add_key, keyctl, request_key; remove them (\"~add_key\"), kill them, or allow each with a rule that says why"),
        Broken(label: "dangerous syscall logged", yaml: header + "\n  allow: [\"@default\"]\n  log: [bpf]\n", line: 5, column: 9,
               message: "bpf is a dangerous system call (it loads programs into the kernel)"),
        Broken(label: "dangerous rule without why", yaml: header + "\n  allow: [\"@default\"]\n  rules:\n    - {syscall: unshare, action: allow}\n", line: 6, column: 7,
               message: "unshare is a dangerous system call (it creates new namespaces, the door to most unprivileged kernel attack surface); a rule that lets it run needs a \"why:\""),
        Broken(label: "dangerous conditional rule without why", yaml: header + "\n  allow: [\"@default\"]\n  rules:\n    - {syscall: setns, action: allow, when: \"arg1 == 0\"}\n", line: 6, column: 7,
               message: "setns is a dangerous system call (it enters other namespaces); a rule that lets it run needs a \"why:\""),
        Broken(label: "empty why does not justify", yaml: header + "\n  allow: [\"@default\"]\n  rules:\n    - {syscall: userfaultfd, action: allow, why: \"  \"}\n", line: 6, column: 7,
               message: "userfaultfd is a dangerous system call"),
        Broken(label: "default allow lets dangerous syscalls run", yaml: "version: 1\nseccomp:\n  default: allow\n  kill: [ptrace]\n", line: 3, column: 12,
               message: "the default action allow lets dangerous system calls run: acct, add_key, bpf"),
        Broken(label: "two rules without conditions in one file", yaml: header + "\n  allow: [\"@default\"]\n  rules:\n    - {syscall: ioctl, action: allow}\n    - {syscall: ioctl, action: log}\n",
               line: 7, column: 7, message: "a second rule without conditions for ioctl (the first is at line 6)"),
        Broken(label: "empty extends", yaml: "extends: \"\"\n" + minimalPolicy, line: 1, column: 10,
               message: "extends needs a policy name (standard) or a path (./base.yaml)"),
        Broken(label: "extends with a list", yaml: "extends: [a, b]\n" + minimalPolicy, line: 1, column: 10,
               message: "extends (one policy name or path) must be a single value, found a list"),
        Broken(label: "include of a missing file", yaml: minimalPolicy + "\ninclude: [./does-not-exist.yaml]\n", line: 5, column: 11,
               message: "cannot include \"./does-not-exist.yaml\": does-not-exist.yaml: no such policy file"),
        Broken(label: "unknown key in a rule", yaml: header + "\n  allow: [\"@default\"]\n  rules:\n    - {syscall: ioctl, action: allow, wehn: \"arg1 == 1\"}\n",
               line: 6, column: 39, message: "unknown key \"wehn\" in a rule; did you mean \"when\"?"),
    ]

    @Test(arguments: cases)
    func reportsTheProblemWithItsLine(_ c: Broken) throws {
        let found = problems(c.yaml)
        let first = try #require(found.first, "no problem reported")
        #expect(found.count == 1, "\(found)")
        #expect(first.file == "t.yaml")
        #expect(first.line == c.line, "\(first)")
        if let column = c.column { #expect(first.column == column, "\(first)") }
        #expect(first.message.contains(c.message), "\(first)")
        #expect(first.description.hasPrefix("t.yaml:\(c.line):"))
        // load throws the same problem.
        #expect(throws: first) { try PolicyLoader.load(yaml: c.yaml, name: "t", sourcePath: "t.yaml") }
    }

    @Test func aFifoIsRefusedNotRead() throws {
        let path = try makeTemporaryDirectory().appendingPathComponent("fifo.yaml").path
        #expect(mkfifo(path, 0o600) == 0)
        defer { unlink(path) }
        // Reading a FIFO nobody writes would block forever.
        #expect { try PolicyLoader.load(file: path) } throws: { "\($0)".contains("is not a regular file") }
    }

    @Test func aHugeUnknownNameIsReportedQuickly() {
        // Found by fuzzing (policy-yaml): the "did you mean" search computed the edit distance of
        // an unknown name to every system call name, in time and memory proportional to the
        // name's length each; a policy with a name of a few hundred KiB took minutes to check.
        let name = String(repeating: "x", count: 256 << 10)
        var found: [PolicyError] = []
        let elapsed = ContinuousClock().measure { found = problems(minimalPolicy + "\n  kill: [\(name)]\n") }
        #expect(found.count == 1 && found.first?.message.contains("unknown system call") == true)
        #expect(elapsed < .seconds(5), "checking took \(elapsed)")
    }

    @Test func manyUnknownNamesAreReportedQuickly() {
        // Found by fuzzing (policy-yaml: a 6 KiB policy took more than 10 s): each unknown name
        // was compared with every system call name for its "did you mean". Every problem is still
        // reported; hints stop after the first 20 of a load.
        let names = (0..<10_000).map { "io_uring_setu\($0)" }
        var found: [PolicyError] = []
        let elapsed = ContinuousClock().measure {
            found = problems(minimalPolicy + "\n  kill: [\(names.joined(separator: ", "))]\n")
        }
        #expect(found.count == names.count)
        #expect(found.allSatisfy { $0.message.contains("unknown system call") })
        #expect(found.prefix(20).allSatisfy { $0.message.contains("did you mean \"io_uring_setup\"") })
        #expect(found.dropFirst(20).allSatisfy { !$0.message.contains("did you mean") })
        #expect(elapsed < .seconds(5), "checking took \(elapsed)")
    }

    @Test func collectsEveryProblemOfAFile() throws {
        let yaml = """
            version: 1
            seccomp:
              default: kill
              allow: ["@default", opnat, "@nope"]
            filesystem:
              tmpfs: { /tmp: big }
            limits:
              processes: many
            """
        let found = problems(yaml)
        #expect(found.map(\.line) == [4, 4, 6, 8])
        #expect(found.map(\.column) == [23, 31, 18, 14])
        do {
            _ = try PolicyLoader.load(yaml: yaml, name: "t", sourcePath: "t.yaml")
            Issue.record("expected an error")
        } catch {
            #expect(error.line == 4 && error.column == 23)
            #expect(error.additional == Array(found.dropFirst()))
            #expect(error.description.split(separator: "\n").count == 4)
            #expect(error.description.hasPrefix("t.yaml:4:23: unknown system call \"opnat\"; did you mean \"openat\"?\nt.yaml:4:31: unknown syscall group"))
        }
    }

    @Test func filesAreReadWithTheirPath() throws {
        let dir = try makeTemporaryDirectory()
        let file = dir.appendingPathComponent("broken.yaml").path
        try (minimalPolicy + "\nlimits: {memory: lots}\n").write(toFile: file, atomically: true, encoding: .utf8)
        let found = PolicyLoader.check(file: file)
        #expect(found.count == 1)
        #expect(found.first?.description.hasPrefix("\(file):5:18: bad value \"lots\" for memory") == true, "\(found)")
        let missing = PolicyLoader.check(file: dir.appendingPathComponent("nope.yaml").path)
        #expect(missing.first?.message == "no such policy file")
        #expect(missing.first?.line == 0)
    }
}
