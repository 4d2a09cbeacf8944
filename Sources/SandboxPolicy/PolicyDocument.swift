import CSeccomp
import Yams

/// Parses and validates one policy file (format version 1) into a ``Policy``,
/// reporting every problem it can find with its line and column.
struct PolicyDocument {
    static let formatVersion = "1"
    static let topKeys = ["version", "description", "seccomp", "filesystem", "network", "environment", "limits"]
    static let seccompKeys = ["default", "allow", "log", "errno", "kill", "rules"]
    static let ruleKeys = ["syscall", "action", "when", "why"]
    static let filesystemKeys = ["ro-bind", "ro-bind-optional", "bind", "bind-optional", "tmpfs"]
    static let environmentKeys = ["pass", "set"]
    static let limitKeys = ["memory", "processes", "cpu-seconds", "open-files", "file-size", "wall-clock"]
    static let reservedLater = "is reserved for a later version of the policy format and not supported yet"

    let diag: Diagnostics
    let reader: NodeReader
    let name: String
    let sourcePath: String?

    init(diag: Diagnostics, name: String, sourcePath: String?) {
        self.diag = diag
        self.reader = NodeReader(diag: diag)
        self.name = name
        self.sourcePath = sourcePath
    }

    // MARK: Document

    func parse(yaml: String) -> Policy? {
        let root: Node
        do {
            // `.basic` resolves nothing: every scalar stays a string that we interpret ourselves,
            // and Yams need not build its default resolver (a set of regular expressions).
            guard let node = try Yams.compose(yaml: yaml, .basic) else {
                diag.error(Loc(line: 1, column: 1), "the policy file is empty; it needs at least \"version: 1\" and a \"seccomp\" section")
                return nil
            }
            root = node
        } catch let error as YamlError {
            reportYAML(error, yaml: yaml)
            return nil
        } catch {
            diag.error(Loc(line: 1, column: 1), "cannot parse YAML: \(error)")
            return nil
        }
        if containsAlias(root) {
            diag.error(root, "YAML aliases (*name) are not supported in policy files; write the values out")
            return nil
        }
        guard let entries = reader.mapping(
            root, what: "the policy", keys: Self.topKeys,
            reserved: ["extends": Self.reservedLater, "include": Self.reservedLater])
        else { return nil }

        var policy = Policy(name: name, sourcePath: sourcePath, seccomp: SeccompPolicy())
        var sawVersion = false, sawSeccomp = false
        for (key, _, value) in entries {
            switch key {
            case "version":
                sawVersion = true
                if let v = reader.string(value, what: "version"), v != Self.formatVersion {
                    diag.error(value, "unsupported policy format version \"\(v)\"; this extsandbox reads version \(Self.formatVersion)")
                }
            case "description":
                if let d = reader.string(value, what: "description") {
                    policy.description = d.trimmingTrailingNewlines
                }
            case "seccomp":
                sawSeccomp = true
                if let s = parseSeccomp(value) { policy.seccomp = s }
            case "filesystem":
                if let f = parseFilesystem(value) { policy.filesystem = f }
            case "network":
                if let text = reader.string(value, what: "network") {
                    if text != "none" {
                        diag.error(value, "unknown network mode \"\(text)\"; the only mode is \"none\" (a network namespace with loopback only)")
                    }
                    policy.network = .none
                }
            case "environment":
                if let e = parseEnvironment(value) { policy.environment = e }
            case "limits":
                if let l = parseLimits(value) { policy.limits = l }
            default:
                break
            }
        }
        let top = Loc(line: 1, column: 1)
        if !sawVersion && !diag.suggestedKeys.contains("version") {
            diag.error(top, "missing required key \"version\" (write \"version: 1\" at the top)")
        }
        if !sawSeccomp && !diag.suggestedKeys.contains("seccomp") {
            diag.error(top, "missing required section \"seccomp\"")
        }
        return diag.errors.isEmpty ? policy : nil
    }

    private func containsAlias(_ node: Node) -> Bool {
        switch node {
        case .alias: return true
        case .scalar: return false
        case .sequence(let s): return s.contains(where: containsAlias)
        case .mapping(let m): return m.contains { containsAlias($0.key) || containsAlias($0.value) }
        }
    }

    /// Yams reports a duplicate key at its mapping; find the second occurrence of the key among the
    /// lines indented like the mapping's keys (best effort: falls back to the mapping).
    private func duplicateLocation(of key: String, in yaml: String, mappingAt mark: Mark) -> Loc {
        let lines = yaml.split(separator: "\n", omittingEmptySubsequences: false)
        var seen = 0
        for index in max(0, mark.line - 1)..<lines.count {
            let line = lines[index]
            let indent = line.prefix(while: { $0 == " " }).count
            guard indent == mark.column - 1 else { continue }
            let rest = line.dropFirst(indent)
            if rest.hasPrefix(key + ":") || rest.hasPrefix("\"\(key)\":") || rest.hasPrefix("'\(key)':") {
                seen += 1
                if seen == 2 { return Loc(line: index + 1, column: indent + 1) }
            }
        }
        return Loc(mark)
    }

    private func reportYAML(_ error: YamlError, yaml: String) {
        func describe(_ problem: String, _ context: YamlError.Context?) -> String {
            if let context, !context.text.isEmpty {
                return "YAML syntax error: \(problem) (\(context.text) at line \(context.mark.line))"
            }
            return "YAML syntax error: \(problem)"
        }
        switch error {
        case let .scanner(context, problem, mark, _), let .parser(context, problem, mark, _),
            let .composer(context, problem, mark, _):
            diag.error(Loc(mark), describe(problem, context))
        case let .duplicatedKeysInMapping(duplicates, context):
            for key in duplicates.sorted() {
                diag.error(duplicateLocation(of: key, in: yaml, mappingAt: context.mark), "duplicate key \"\(key)\"")
            }
        case let .reader(problem, _, _, _):
            diag.error(Loc(line: 1, column: 1), "cannot read the policy file: \(problem)")
        default:
            diag.error(Loc(line: 1, column: 1), "YAML error: \(error)")
        }
    }

    // MARK: Actions and names

    func parseAction(_ node: Node, what: String) -> SyscallAction? {
        guard let text = reader.string(node, what: what) else { return nil }
        let words = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        let known = ["allow", "kill", "log", "errno"]
        switch words.first {
        case "allow" where words.count == 1: return .allow
        case "kill" where words.count == 1: return .killProcess
        case "log" where words.count == 1: return .log
        case "errno":
            guard words.count == 2 else {
                diag.error(node, "\"errno\" takes one errno name, for example \"errno EPERM\"")
                return nil
            }
            let offset = text.range(of: words[1]).map { text.distance(from: text.startIndex, to: $0.lowerBound) } ?? 0
            return parseErrno(words[1], loc: reader.loc(in: node, offset: offset)).map { .errno($0) }
        case let word?:
            if known.contains(word) {
                diag.error(node, "\"\(word)\" takes no argument; write \"\(word)\"")
            } else {
                diag.error(node, "unknown action \"\(text)\"\(Suggest.hint(for: word, in: known)); actions are allow, kill, log and errno NAME")
            }
            return nil
        case nil:
            diag.error(node, "\(what) is empty; write allow, kill, log or errno NAME")
            return nil
        }
    }

    func parseErrno(_ text: String, loc: Loc) -> Int32? {
        if let value = PolicyConstants.errnos[text] { return value }
        if let n = Int32(text), (1...4095).contains(n) { return n }
        diag.error(loc, "unknown errno \"\(text)\"\(Suggest.hint(for: text, in: PolicyConstants.errnos.keys))")
        return nil
    }

    /// Whether `name` is an x86_64 syscall; reports a precise error if not.
    func checkSyscall(_ name: String, loc: Loc) -> Bool {
        if Syscalls.number(of: name) != nil { return true }
        let anyArch = seccomp_syscall_resolve_name(name)
        if anyArch != __NR_SCMP_ERROR {
            diag.error(loc, "\"\(name)\" is not a system call on x86_64")
        } else {
            diag.error(loc, "unknown system call \"\(name)\"\(Suggest.hint(for: name, in: Syscalls.allNames))")
        }
        return false
    }

    // MARK: seccomp

    struct Origin {
        var section: String
        var item: String
        var loc: Loc
        var text: String { "by \"\(item)\" in \(section) (line \(loc.line))" }
    }

    struct RuleEntry {
        var syscall: String
        var action: SyscallAction
        var conditions: [ArgumentCondition]
        var why: String?
        var loc: Loc
    }

    static let clone3Explanation =
        "clone3 always fails with ENOSYS so that the C library falls back to clone, whose flags the filter can check (clone3 passes its flags in memory, which seccomp cannot read)"

    /// Expands one list (`allow`, `kill`, …) in order; `~name` removes what earlier entries added.
    func resolveList(_ node: Node, section: String, errnoValue: Int32? = nil) -> [String: Origin] {
        var result: [String: Origin] = [:]
        guard let items = reader.stringList(node, what: section) else { return result }
        for (raw, itemNode) in items {
            let text = raw.trimmedBlanks
            let remove = text.hasPrefix("~")
            let name = remove ? String(text.dropFirst()).trimmedBlanks : text
            let loc = reader.loc(in: itemNode, offset: remove ? 1 : 0)
            var names: [String]
            if name.isEmpty {
                diag.error(itemNode, "empty entry in \(section)")
                continue
            } else if name.hasPrefix("@") {
                guard let members = SyscallGroups.syscalls(in: name) else {
                    diag.error(loc, "unknown syscall group \"\(name)\"\(Suggest.hint(for: name, in: SyscallGroups.names))")
                    continue
                }
                // clone3 is always ENOSYS, whatever a group says.
                names = members.filter { $0 != "clone3" }
            } else {
                guard checkSyscall(name, loc: loc) else { continue }
                if name == "clone3" && !remove && errnoValue != 38 {
                    diag.error(loc, "clone3 cannot be listed in \(section): \(Self.clone3Explanation)")
                    continue
                }
                names = [name]
            }
            for n in names {
                if remove {
                    result[n] = nil
                } else if result[n] == nil {
                    result[n] = Origin(section: section, item: name, loc: loc)
                }
            }
        }
        return result
    }

    func parseSeccomp(_ node: Node) -> SeccompPolicy? {
        let errorsBefore = diag.errors.count
        guard let entries = reader.mapping(node, what: "seccomp", keys: Self.seccompKeys) else { return nil }
        var defaultAction: SyscallAction?
        var defaultLoc = Loc(node)
        // (section, action, resolved list) in increasing strength
        var lists: [(String, SyscallAction, [String: Origin])] = []
        var rules: [RuleEntry] = []
        for (key, _, value) in entries {
            switch key {
            case "default":
                defaultAction = parseAction(value, what: "the default action")
                defaultLoc = Loc(value)
            case "allow": lists.append(("allow", .allow, resolveList(value, section: "allow")))
            case "log": lists.append(("log", .log, resolveList(value, section: "log")))
            case "kill": lists.append(("kill", .killProcess, resolveList(value, section: "kill")))
            case "errno":
                guard let groups = reader.dataMapping(value, what: "errno") else { continue }
                for (errnoName, errnoLoc, listNode) in groups {
                    guard let e = parseErrno(errnoName, loc: errnoLoc) else { continue }
                    lists.append(("errno \(errnoName)", .errno(e), resolveList(listNode, section: "errno \(errnoName)", errnoValue: e)))
                }
            case "rules":
                rules = parseRules(value)
            default:
                break
            }
        }
        guard let defaultAction else {
            if !entries.contains(where: { $0.key == "default" }) && !diag.suggestedKeys.contains("default") {
                diag.error(Loc(node), "seccomp needs a \"default\" action (kill, allow, log or errno NAME) for the system calls no list names")
            }
            return nil
        }

        // Plain (unconditional) actions from the lists: the strongest wins (kill > errno > log > allow).
        func strength(_ a: SyscallAction) -> Int {
            switch a {
            case .allow: return 0
            case .log: return 1
            case .errno: return 2
            case .killProcess: return 3
            }
        }
        var plain: [String: (action: SyscallAction, origin: Origin)] = [:]
        for (_, action, map) in lists {
            for sys in map.keys.sorted() {
                let origin = map[sys]!
                if let existing = plain[sys] {
                    if case .errno(let a) = existing.action, case .errno(let b) = action, a != b {
                        diag.error(origin.loc, "\(sys) would fail with \(action) here but with \(existing.action) \(existing.origin.text); give it one errno")
                    } else if strength(action) > strength(existing.action) {
                        plain[sys] = (action, origin)
                    }
                } else {
                    plain[sys] = (action, origin)
                }
            }
        }

        // Rules: unconditional ones override the lists; conditional ones fall back to the plain action.
        var unconditional: [String: RuleEntry] = [:]
        var conditional: [String: [RuleEntry]] = [:]
        for rule in rules {
            if rule.conditions.isEmpty {
                if let earlier = unconditional[rule.syscall] {
                    diag.error(rule.loc, "a second rule without conditions for \(rule.syscall) (the first is at line \(earlier.loc.line))")
                } else {
                    unconditional[rule.syscall] = rule
                }
            } else {
                if let first = conditional[rule.syscall]?.first, first.action != rule.action {
                    diag.error(rule.loc, "rules for \(rule.syscall) with conditions must all have the same action (line \(first.loc.line) says \(first.action), this one \(rule.action)); a syscall gets one conditional action and one fallback")
                    continue
                }
                conditional[rule.syscall, default: []].append(rule)
            }
        }
        for sys in conditional.keys.sorted() {
            let fallback: SyscallAction
            let fallbackText: String
            if let u = unconditional[sys] {
                fallback = u.action
                fallbackText = "by the rule without conditions at line \(u.loc.line)"
            } else if let p = plain[sys] {
                fallback = p.action
                fallbackText = p.origin.text
            } else {
                fallback = defaultAction
                fallbackText = "by the default action"
            }
            for rule in conditional[sys]! {
                if rule.action == fallback {
                    var fix = ""
                    if let p = plain[sys], unconditional[sys] == nil {
                        fix = "; remove it from \(p.origin.section) (for example with \"~\(sys)\") so that only the conditions decide"
                    }
                    diag.error(rule.loc, "this rule has no effect: \(sys) is already \(rule.action.pastTense) \(fallbackText)\(fix)")
                } else if rule.action == defaultAction {
                    diag.error(rule.loc, "a conditional rule cannot use the default action (\(defaultAction)) while \(sys) otherwise gets \(fallback) (\(fallbackText)): libseccomp cannot express it; use another action, such as errno EPERM")
                }
            }
        }

        // execve must run: the sandbox execs its program after loading the filter. (Not checked
        // when the section already has problems: the lists may be incomplete.)
        guard diag.errors.count == errorsBefore else { return nil }
        let execveAction = unconditional["execve"]?.action ?? plain["execve"]?.action ?? defaultAction
        let execveOK = (execveAction == .allow || execveAction == .log) && conditional["execve"] == nil
        if !execveOK {
            let loc = conditional["execve"]?.first?.loc ?? unconditional["execve"]?.loc ?? plain["execve"]?.origin.loc
                ?? defaultLoc
            diag.error(loc, "execve must be allowed without conditions: the sandbox starts its program with execve after loading the filter (add \"execve\" or \"@default\" to allow)")
        }

        guard diag.errors.count == errorsBefore else { return nil }

        var out: [SyscallRule] = []
        let names = Set(plain.keys).union(unconditional.keys).union(conditional.keys).union(["clone3"])
        for sys in names.sorted() {
            if sys == "clone3" {
                out.append(SyscallRule(syscall: "clone3", action: .errno(38), justification: Self.clone3Explanation))
                continue
            }
            if let u = unconditional[sys] {
                out.append(SyscallRule(syscall: sys, action: u.action, justification: u.why))
            } else if let p = plain[sys] {
                out.append(SyscallRule(syscall: sys, action: p.action))
            }
            for c in conditional[sys] ?? [] {
                out.append(SyscallRule(syscall: sys, action: c.action, conditions: c.conditions, justification: c.why))
            }
        }
        return SeccompPolicy(defaultAction: defaultAction, rules: out)
    }

    func parseRules(_ node: Node) -> [RuleEntry] {
        guard let items = reader.list(node, what: "rules") else { return [] }
        var out: [RuleEntry] = []
        for item in items {
            guard let fields = reader.mapping(item, what: "a rule", keys: Self.ruleKeys) else { continue }
            var syscall: String?
            var action: SyscallAction?
            var conditions: [ArgumentCondition] = []
            var why: String?
            var ok = true
            for (key, _, value) in fields {
                switch key {
                case "syscall":
                    guard let name = reader.string(value, what: "syscall") else { ok = false; continue }
                    if name.hasPrefix("@") {
                        diag.error(value, "a rule names one system call, not a group (\"\(name)\"); use the allow, kill, log or errno lists for groups")
                        ok = false
                    } else if !checkSyscall(name, loc: Loc(value)) {
                        ok = false
                    } else {
                        syscall = name
                    }
                case "action":
                    action = parseAction(value, what: "action")
                    if action == nil { ok = false }
                case "when":
                    guard let conds = reader.stringList(value, what: "when") else { ok = false; continue }
                    var seenArgs: [Int: Loc] = [:]
                    for (text, condNode) in conds {
                        do {
                            let c = try ConditionParser.parse(text)
                            if let earlier = seenArgs[c.index] {
                                diag.error(Loc(condNode), "a second condition on arg\(c.index) in one rule (the first is at line \(earlier.line)); libseccomp allows one comparison per argument in a rule — write two rules instead")
                                ok = false
                                continue
                            }
                            seenArgs[c.index] = Loc(condNode)
                            conditions.append(c)
                        } catch {
                            diag.error(reader.loc(in: condNode, offset: error.offset), error.message)
                            ok = false
                        }
                    }
                case "why":
                    why = reader.string(value, what: "why")
                default:
                    break
                }
            }
            if ok && (syscall == nil || action == nil) {
                let missing = syscall == nil ? "syscall" : "action"
                diag.error(item, "a rule needs \"\(missing)\"")
                continue
            }
            guard ok, let syscall, let action else { continue }
            if syscall == "clone3" && !(action == .errno(38) && conditions.isEmpty) {
                diag.error(item, "a rule cannot change clone3: \(Self.clone3Explanation)")
                continue
            }
            out.append(RuleEntry(syscall: syscall, action: action, conditions: conditions, why: why, loc: Loc(item)))
        }
        return out
    }

    // MARK: filesystem

    /// An absolute, normalized path; reports a problem and returns nil otherwise.
    func path(_ text: String, loc: Loc, what: String) -> String? {
        guard text.hasPrefix("/") else {
            diag.error(loc, "\(what) must be an absolute path, found \"\(text)\"")
            return nil
        }
        let parts = text.split(separator: "/", omittingEmptySubsequences: true)
        if parts.contains(where: { $0 == ".." || $0 == "." }) {
            diag.error(loc, "\(what) must not contain \".\" or \"..\" components: \"\(text)\"")
            return nil
        }
        if text.contains("\0") || text.contains("\n") {
            diag.error(loc, "\(what) contains a control character")
            return nil
        }
        return "/" + parts.joined(separator: "/")
    }

    func parseFilesystem(_ node: Node) -> FilesystemPolicy? {
        if node.isNull { return FilesystemPolicy() }
        guard let entries = reader.mapping(
            node, what: "filesystem", keys: Self.filesystemKeys, reserved: ["mask": Self.reservedLater])
        else { return nil }
        var mounts: [MountEntry] = []
        var destinations: [String: Loc] = [:]
        func add(_ entry: MountEntry, destination: String, loc: Loc) {
            if destination == "/" {
                diag.error(loc, "cannot mount over \"/\": the sandbox's root is an empty tmpfs that the entries fill")
                return
            }
            if let earlier = destinations[destination] {
                diag.error(loc, "\(destination) is mounted twice (also at line \(earlier.line))")
                return
            }
            destinations[destination] = loc
            mounts.append(entry)
        }
        for (key, _, value) in entries {
            if key == "tmpfs" {
                guard let items = reader.dataMapping(value, what: "tmpfs") else { continue }
                for (dest, destLoc, sizeNode) in items {
                    guard let d = path(dest, loc: destLoc, what: "a tmpfs mount point") else { continue }
                    guard let sizeText = reader.string(sizeNode, what: "the size of tmpfs \(dest)") else { continue }
                    guard let size = Values.size(sizeText), size > 0 else {
                        diag.error(sizeNode, "bad size \"\(sizeText)\" for tmpfs \(dest); write a size like 64K, 256M or 1G (binary units) or a number of bytes")
                        continue
                    }
                    add(.tmpfs(destination: d, sizeBytes: size), destination: d, loc: destLoc)
                }
                continue
            }
            let writable = key.hasPrefix("bind")
            let optional = key.hasSuffix("-optional")
            guard let items = reader.list(value, what: key) else { continue }
            for item in items {
                switch item {
                case .scalar(let s):
                    guard let p = path(s.string, loc: Loc(item), what: "a \(key) path") else { continue }
                    add(.bind(source: p, destination: p, writable: writable, optional: optional), destination: p, loc: Loc(item))
                case .mapping:
                    guard let fields = reader.mapping(item, what: "a \(key) entry", keys: ["from", "to"]) else { continue }
                    var from: String?, to: String?
                    for (k, _, v) in fields {
                        guard let text = reader.string(v, what: k) else { continue }
                        let p = path(text, loc: Loc(v), what: k == "from" ? "the host path (from)" : "the path inside (to)")
                        if k == "from" { from = p } else { to = p }
                    }
                    guard fields.count == 2 else {
                        diag.error(item, "a \(key) entry with a mapping needs both \"from\" (host path) and \"to\" (path inside)")
                        continue
                    }
                    if let from, let to {
                        add(.bind(source: from, destination: to, writable: writable, optional: optional), destination: to, loc: Loc(item))
                    }
                default:
                    diag.error(item, "a \(key) entry is a path or {from: HOST, to: INSIDE}, found \(item.kindName)")
                }
            }
        }
        return FilesystemPolicy(mounts: mounts)
    }

    // MARK: environment and limits

    func parseEnvironment(_ node: Node) -> EnvironmentPolicy? {
        if node.isNull { return EnvironmentPolicy() }
        guard let entries = reader.mapping(node, what: "environment", keys: Self.environmentKeys) else { return nil }
        var env = EnvironmentPolicy()
        for (key, _, value) in entries {
            if key == "pass" {
                for (name, itemNode) in reader.stringList(value, what: "pass") ?? [] {
                    if Values.isVariableName(name) {
                        if !env.pass.contains(name) { env.pass.append(name) }
                    } else {
                        diag.error(itemNode, "\"\(name)\" is not an environment variable name")
                    }
                }
            } else {
                for (name, nameLoc, valueNode) in reader.dataMapping(value, what: "set") ?? [] {
                    guard Values.isVariableName(name) else {
                        diag.error(nameLoc, "\"\(name)\" is not an environment variable name")
                        continue
                    }
                    if let v = reader.string(valueNode, what: "the value of \(name)") { env.set[name] = v }
                }
            }
        }
        return env
    }

    func parseLimits(_ node: Node) -> ResourceLimits? {
        if node.isNull { return ResourceLimits() }
        guard let entries = reader.mapping(node, what: "limits", keys: Self.limitKeys) else { return nil }
        var limits = ResourceLimits()
        for (key, _, value) in entries {
            guard let text = reader.string(value, what: key) else { continue }
            if Values.isUnlimited(text) { continue }
            let parsed: UInt64?
            let expected: String
            switch key {
            case "memory", "file-size":
                parsed = Values.size(text)
                expected = "a size like 64K, 256M or 1G (binary units), a number of bytes, or none"
            case "cpu-seconds", "wall-clock":
                parsed = Values.seconds(text)
                expected = "a number of seconds (or 90s, 10m, 2h), or none"
            default:
                parsed = Values.count(text)
                expected = "a whole number, or none"
            }
            guard let parsed else {
                diag.error(value, "bad value \"\(text)\" for \(key); expected \(expected)")
                continue
            }
            switch key {
            case "memory": limits.memoryBytes = parsed
            case "processes": limits.processes = parsed
            case "cpu-seconds": limits.cpuSeconds = parsed
            case "open-files": limits.openFiles = parsed
            case "file-size": limits.fileSizeBytes = parsed
            default: limits.wallClockSeconds = parsed
            }
        }
        return limits
    }
}

extension SyscallAction {
    /// "allowed", "killed", "logged", "failing with EPERM".
    var pastTense: String {
        switch self {
        case .allow: return "allowed"
        case .killProcess: return "killed"
        case .log: return "logged"
        case .errno: return "failing with \(description.dropFirst(6))"
        }
    }
}

extension String {
    var trimmingTrailingNewlines: String {
        var s = self
        while s.last == "\n" { s.removeLast() }
        return s
    }

    var trimmedBlanks: String {
        let set = " \t"
        var s = Substring(self)
        while let f = s.first, set.contains(f) { s = s.dropFirst() }
        while let l = s.last, set.contains(l) { s = s.dropLast() }
        return String(s)
    }
}
