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
        func action(of name: String) -> String {
            let rules = byName[name] ?? []
            if rules.isEmpty { return text(seccomp.defaultAction) }
            if rules.contains(where: { !$0.conditions.isEmpty }) { return "conditional" }
            return text(rules[0].action)
        }
        for group in SyscallGroups.all where group.name != "@default" && group.name != "@known" {
            let names = (SyscallGroups.syscalls(in: group.name) ?? []).filter { Syscalls.number(of: $0) != nil }
            guard !names.isEmpty else { continue }
            var counts: [String: Int] = [:]
            for name in names { counts[action(of: name), default: 0] += 1 }
            let denied = counts.filter { $0.key != "allowed" && $0.key != "logged" && $0.key != "conditional" }
            guard !denied.isEmpty else { continue }
            let summary = counts.sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }
                .map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            let all = denied.count == 1 && denied.first!.value == names.count
            rows.append(.init(what: group.name, sandbox: all ? "\(denied.first!.key) (all \(names.count))" : summary))
        }
        rows.append(.init(what: "exec after start", sandbox: seccomp.allowExecAfterStart ? "allowed" : "killed (execve/execveat after the launch)"))
        switch policy.network {
        case .none: rows.append(.init(what: "network", sandbox: "no network: loopback only, in its own network namespace"))
        }
        var readOnly: [String] = [], writable: [String] = []
        for mount in policy.filesystem.mounts {
            switch mount {
            case .bind(_, let destination, let isWritable, _): (isWritable ? { writable.append(destination) } : { readOnly.append(destination) })()
            case .tmpfs(let destination, let size): writable.append("\(destination) (tmpfs, \(size >> 20) MiB)")
            }
        }
        rows.append(.init(what: "filesystem", sandbox: "only: read-only \(readOnly.isEmpty ? "nothing" : readOnly.joined(separator: " ")); writable \(writable.isEmpty ? "nothing" : writable.joined(separator: " ")); a fresh /proc, a minimal /dev"))
        var limits: [String] = []
        if let memory = policy.limits.memoryBytes { limits.append("memory \(memory >> 20) MiB") }
        if let processes = policy.limits.processes { limits.append("\(processes) processes") }
        if let files = policy.limits.openFiles { limits.append("\(files) open files") }
        if let cpu = policy.limits.cpuSeconds { limits.append("\(cpu) s CPU") }
        if let wall = policy.limits.wallClockSeconds { limits.append("\(wall) s wall clock") }
        if !limits.isEmpty { rows.append(.init(what: "limits", sandbox: limits.joined(separator: ", "))) }
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
