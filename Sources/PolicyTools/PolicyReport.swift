import SandboxPolicy

/// Human-readable views of a resolved policy, for `extsandbox policy show` (in the spirit of
/// `systemd-analyze syscall-filter`).
public enum PolicyReport {
    /// The fully resolved policy: where it came from, the compiled filter's size, the default
    /// action, every named system call with its action and conditions (sorted by name), then the
    /// file system, network, environment and limits.
    ///
    /// - Parameter everySyscall: also list each x86_64 system call the policy does not name,
    ///   with the default action.
    public static func show(_ policy: Policy, everySyscall: Bool = false) -> String {
        var out: [String] = []
        let headline = policy.description.split(separator: "\n").joined(separator: " ")
        out.append("# \(policy.name)\(headline.isEmpty ? "" : ": " + headline)")
        if let source = policy.sourcePath { out.append("# file:      \(source)") }
        if policy.composedFrom.count > 1 {
            out.append("# made from: \(policy.composedFrom.joined(separator: " → ")) (later files win)")
        }
        out.append(filterLine(policy))
        out.append("")

        let seccomp = policy.seccomp
        let named = Set(seccomp.rules.map(\.syscall))
        out.append("seccomp:")
        out.append("  default:          \(actionText(seccomp.defaultAction))  (every system call not listed below)")
        out.append("  exec after start: " + (seccomp.allowExecAfterStart
            ? "allowed (execve as listed below)"
            : "no: the supervisor lets the sandbox's own launch through and kills any later execve or execveat"))
        out.append("  W^X memory:       " + (seccomp.memoryDenyWriteExecute
            ? "memory-deny-write-execute: no page is writable and executable, at once or in turn (PR_SET_MDWE)"
            : "not enforced (memory-deny-write-execute: false)"))
        out.append("  foreign arch:     kill  (i386 and x32 system calls, always)")
        out.append("  built in:         wherever a call below would run (allow, log):")
        out.append("                    errno EPERM   a mode with S_ISUID or S_ISGID in " + BuiltinRefusals.modeArguments.map { "\($0.syscall)(arg\($0.index))" }.joined(separator: " "))
        out.append("                    errno EPERM   a device node: S_IFCHR or S_IFBLK in mknod(arg1) mknodat(arg2), RENAME_WHITEOUT in renameat2(arg4)")
        out.append("                    errno ENOSYS  openat2 (its mode is in memory)")
        out.append("                    errno EPERM   seccomp(SECCOMP_SET_MODE_FILTER), prctl(PR_SET_SECCOMP) but strict mode: no nested filters")
        out.append("  system calls:     \(named.count) named; a call takes the first line below whose conditions hold")
        out.append("")

        let width = max(24, (seccomp.rules.map(\.syscall.count).max() ?? 0) + 2)
        func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s + " " : s + String(repeating: " ", count: n - s.count) }
        let actionWidth = 14
        var byName: [String: [SyscallRule]] = [:]
        for rule in seccomp.rules { byName[rule.syscall, default: []].append(rule) }
        var names = named
        if everySyscall { names.formUnion(Syscalls.allNames) }
        for name in names.sorted() {
            let rules = byName[name] ?? []
            if rules.isEmpty {
                out.append("  " + pad(name, width) + pad(actionText(seccomp.defaultAction), actionWidth) + "(default)")
                continue
            }
            let plain = rules.first { $0.conditions.isEmpty }
            // In the order the filter tries them: the first whose conditions hold decides.
            let conditional = RulePrecedence.ordered(rules.filter { !$0.conditions.isEmpty }, action: \.action)
            var first = true
            func line(_ action: String, _ detail: String) {
                out.append("  " + pad(first ? name : "", width) + pad(action, actionWidth) + detail)
                first = false
            }
            for rule in conditional {
                line(actionText(rule.action), "if " + rule.conditions.map(\.description).joined(separator: " and "))
                if let why = rule.justification { out.append("  " + pad("", width) + pad("", actionWidth) + "why: " + oneLine(why)) }
            }
            if let plain {
                var detail = conditional.isEmpty ? "" : "otherwise"
                if !seccomp.allowExecAfterStart && (name == "execve" || name == "execveat") {
                    detail = "after the launch (the supervisor decides)"
                }
                line(actionText(plain.action), detail)
                if let why = plain.justification, seccomp.allowExecAfterStart || (name != "execve" && name != "execveat") {
                    out.append("  " + pad("", width) + pad("", actionWidth) + "why: " + oneLine(why))
                }
            } else {
                line(actionText(seccomp.defaultAction), "otherwise (default)")
            }
        }
        out.append("")

        out.append("filesystem:         (the root is an empty tmpfs; a fresh /proc and a minimal /dev are always added)")
        if policy.filesystem.mounts.isEmpty { out.append("  (nothing else)") }
        for mount in policy.filesystem.mounts {
            switch mount {
            case let .bind(source, destination, writable, optional):
                let kind = (writable ? "bind" : "ro-bind") + (optional ? "-optional" : "")
                let target = source == destination ? source : "\(source) → \(destination)"
                out.append("  " + pad(kind, 20) + target)
            case let .tmpfs(destination, size):
                out.append("  " + pad("tmpfs", 20) + "\(destination) (\(sizeText(size)))")
            }
        }
        for path in policy.filesystem.masked { out.append("  " + pad("mask", 20) + path) }
        out.append("")
        switch policy.network {
        case .none: out.append("network:            none (a private network namespace with loopback only)")
        }
        out.append("")
        out.append("environment:        (starts empty)")
        out.append("  pass:             " + (policy.environment.pass.isEmpty ? "(nothing)" : policy.environment.pass.joined(separator: " ")))
        out.append("  set:              " + (policy.environment.set.isEmpty ? "(nothing)"
            : policy.environment.set.keys.sorted().map { "\($0)=\(policy.environment.set[$0]!)" }.joined(separator: " ")))
        out.append("")
        let l = policy.limits
        out.append("limits:")
        out.append("  memory:           " + (l.memoryBytes.map(sizeText) ?? "none"))
        out.append("  memory-scope:     " + (l.memoryScope == .sandbox
            ? "sandbox (the whole sandbox, through a cgroup; no writable memory cgroup fails the launch)"
            : "per-process (each process on its own: RLIMIT_AS, up to the limit times the process limit in all)"))
        out.append("  processes:        " + (l.processes.map { "\($0)" } ?? "none"))
        out.append("  cpu-seconds:      " + (l.cpuSeconds.map { "\($0)" } ?? "none"))
        out.append("  open-files:       " + (l.openFiles.map { "\($0)" } ?? "none"))
        out.append("  file-size:        " + (l.fileSizeBytes.map(sizeText) ?? "none"))
        out.append("  wall-clock:       " + (l.wallClockSeconds.map { "\($0)s" } ?? "none"))
        return out.map { line in
            var l = Substring(line)
            while l.last == " " { l = l.dropLast() }
            return String(l)
        }.joined(separator: "\n") + "\n"
    }

    static func filterLine(_ policy: Policy) -> String {
        var parts: [String] = []
        do {
            let f = try policy.compileSeccompFilter(mode: .supervised)
            parts.append("\(f.instructionCount) BPF instructions as the supervisor loads it")
        } catch {
            parts.append("does not compile: \(error.message)")
        }
        if policy.seccomp.allowExecAfterStart,
            let f = try? policy.compileSeccompFilter(mode: .inKernel)
        {
            parts.append("\(f.instructionCount) for the kernel alone")
        }
        return "# filter:    " + parts.joined(separator: "; ")
    }

    static func actionText(_ action: SyscallAction) -> String { action.description }

    static func oneLine(_ text: String) -> String {
        text.split(whereSeparator: \.isNewline).map { String($0).trimmedBlanks }.joined(separator: " ")
    }

    /// 1G, 256M, 64K or bytes.
    public static func sizeText(_ bytes: UInt64) -> String {
        for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] as [(String, UInt64)] {
            let size = UInt64(1) << shift
            if bytes >= size && bytes % size == 0 { return "\(bytes / size)\(unit)" }
        }
        return "\(bytes)"
    }
}
