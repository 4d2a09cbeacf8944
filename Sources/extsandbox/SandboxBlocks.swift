import Glibc
import SandboxPolicy

/// What a policy blocks, in rows for `extsandbox test`: the syscall groups it denies (killed or
/// refused with an errno), then the network, the file system, exec and limits.
enum SandboxBlocks {
    static func table(for policy: Policy) -> [ConformanceReport.Block] {
        var rows: [ConformanceReport.Block] = []
        let seccomp = policy.seccomp
        var byName: [String: [SyscallRule]] = [:]
        for rule in seccomp.rules { byName[rule.syscall, default: []].append(rule) }
        func action(of name: String) -> SyscallAction? {
            let rules = byName[name] ?? []
            if rules.isEmpty { return seccomp.defaultAction }
            if rules.contains(where: { !$0.conditions.isEmpty }) { return nil }
            return rules[0].action
        }
        for group in SyscallGroups.all where group.name != "@default" && group.name != "@known" {
            let names = (SyscallGroups.syscalls(in: group.name) ?? []).filter { Syscalls.number(of: $0) != nil }
            guard !names.isEmpty else { continue }
            // By action as a policy file names it (the JSON), and as the table words it.
            var actions: [String: Int] = [:], counts: [String: Int] = [:]
            for name in names {
                let chosen = action(of: name)
                actions[chosen?.description ?? "conditional", default: 0] += 1
                counts[chosen.map(text) ?? "conditional", default: 0] += 1
            }
            let denied = counts.filter { $0.key != "allowed" && $0.key != "logged" && $0.key != "conditional" }
            guard !denied.isEmpty else { continue }
            let summary = counts.sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }
                .map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            let all = denied.count == 1 && denied.first!.value == names.count
            var row = ConformanceReport.Block(what: group.name, sandbox: all ? "\(denied.first!.key) (all \(names.count))" : summary)
            (row.syscalls, row.actions) = (names.count, actions)
            rows.append(row)
        }
        var exec = ConformanceReport.Block(what: "exec after start",
                                           sandbox: seccomp.allowExecAfterStart ? "allowed" : "killed (execve/execveat after the launch)")
        exec.allowed = seccomp.allowExecAfterStart
        rows.append(exec)
        switch policy.network {
        case .none:
            var network = ConformanceReport.Block(what: "network", sandbox: "no network: loopback only, in its own network namespace")
            network.network = "none"
            rows.append(network)
        }
        var readOnly: [String] = [], writable: [String] = [], tmpfs: [ConformanceReport.Block.Tmpfs] = []
        for mount in policy.filesystem.mounts {
            switch mount {
            case .bind(_, let destination, let isWritable, _): (isWritable ? { writable.append(destination) } : { readOnly.append(destination) })()
            case .tmpfs(let destination, let size): tmpfs.append(.init(destination: destination, sizeBytes: size))
            }
        }
        let writableText = writable + tmpfs.map { "\($0.destination) (tmpfs, \($0.sizeBytes >> 20) MiB)" }
        var filesystem = ConformanceReport.Block(
            what: "filesystem",
            sandbox: "only: read-only \(readOnly.isEmpty ? "nothing" : readOnly.joined(separator: " ")); writable \(writableText.isEmpty ? "nothing" : writableText.joined(separator: " ")); a fresh /proc, a minimal /dev")
        (filesystem.readOnly, filesystem.writable, filesystem.tmpfs) = (readOnly, writable, tmpfs)
        rows.append(filesystem)
        let l = policy.limits
        var limits: [String] = []
        if let memory = l.memoryBytes { limits.append("memory \(memory >> 20) MiB") }
        if let processes = l.processes { limits.append("\(processes) processes") }
        if let files = l.openFiles { limits.append("\(files) open files") }
        if let cpu = l.cpuSeconds { limits.append("\(cpu) s CPU") }
        if let wall = l.wallClockSeconds { limits.append("\(wall) s wall clock") }
        if !limits.isEmpty {
            var row = ConformanceReport.Block(what: "limits", sandbox: limits.joined(separator: ", "))
            (row.memoryBytes, row.processes, row.openFiles, row.cpuSeconds, row.wallClockSeconds) =
                (l.memoryBytes, l.processes, l.openFiles, l.cpuSeconds, l.wallClockSeconds)
            rows.append(row)
        }
        return rows
    }

    private static func text(_ action: SyscallAction) -> String {
        switch action {
        case .allow: return "allowed"
        case .log: return "logged"
        case .killProcess: return "killed"
        case .errno(let code):
            let names: [Int32: String] = [EPERM: "EPERM", EACCES: "EACCES", ENOSYS: "ENOSYS", EINVAL: "EINVAL", ENOENT: "ENOENT"]
            return "errno \(names[code] ?? String(code))"
        }
    }
}
