import CSeccomp
import SandboxSystem
import YAMLSupport

/// Parses and validates one policy file (format version 1) into a ``PolicyLayer``,
/// reporting every problem it can find with its line and column.
struct PolicyParser {
    static let formatVersion = "1"
    static let topKeys = ["version", "description", "extends", "include", "seccomp", "filesystem", "network", "environment", "limits"]
    static let seccompKeys = ["default", "allow-exec-after-start", "memory-deny-write-execute", "allow", "log", "errno", "kill", "rules"]
    static let ruleKeys = ["syscall", "action", "when", "why"]
    static let filesystemKeys = ["ro-bind", "ro-bind-optional", "bind", "bind-optional", "tmpfs", "mask"]
    static let environmentKeys = ["pass", "set"]
    static let limitKeys = ["memory", "memory-scope", "processes", "cpu-seconds", "open-files", "file-size", "wall-clock"]

    let diag: Diagnostics
    let reader: NodeReader
    var file: String { diag.file }

    init(diag: Diagnostics) {
        self.diag = diag
        self.reader = NodeReader(diag: diag)
    }

    /// A position in this file, marked with the file's name.
    func here(_ node: YAMLNode) -> Loc { Loc(node).in(file) }
    func here(_ loc: Loc) -> Loc { loc.in(file) }

    // MARK: Document

    func parse(yaml: String) -> PolicyLayer? {
        let root: YAMLNode
        do {
            guard let node = try YAMLReader.compose(yaml) else {
                diag.error(Loc(line: 1, column: 1), "the policy file is empty; it needs at least \"version: 1\" and a \"seccomp\" section")
                return nil
            }
            root = node
        } catch {
            diag.error(Loc(error.mark), Self.describe(error))
            return nil
        }
        if containsAlias(root) {
            diag.error(root, "YAML aliases (*name) are not supported in policy files; write the values out")
            return nil
        }
        guard let entries = reader.mapping(root, what: "the policy", keys: Self.topKeys) else { return nil }

        var layer = PolicyLayer(file: file)
        var sawVersion = false
        for (key, _, value) in entries {
            switch key {
            case "version":
                sawVersion = true
                if let v = reader.string(value, what: "version"), v != Self.formatVersion {
                    diag.error(value, "unsupported policy format version \"\(v)\"; this extsandbox reads version \(Self.formatVersion)")
                }
            case "description":
                if let d = reader.string(value, what: "description") {
                    layer.description = d.trimmingTrailingNewlines
                }
            case "extends":
                if let target = reader.string(value, what: "extends (one policy name or path)") {
                    if target.trimmedBlanks.isEmpty {
                        diag.error(value, "extends needs a policy name (standard) or a path (./base.yaml)")
                    } else {
                        layer.extends = .init(target: target.trimmedBlanks, loc: here(value))
                    }
                }
            case "include":
                for (target, node) in reader.stringList(value, what: "include") ?? [] {
                    if target.trimmedBlanks.isEmpty {
                        diag.error(node, "empty entry in include; write a policy name or a path")
                    } else {
                        layer.includes.append(.init(target: target.trimmedBlanks, loc: here(node)))
                    }
                }
            case "seccomp":
                layer.seccompLoc = here(value)
                let before = diag.errors.count
                parseSeccomp(value, into: &layer)
                layer.seccompBroken = diag.errors.count != before
            case "filesystem":
                layer.mounts = parseFilesystem(value, masked: &layer.masked)
            case "network":
                if let text = reader.string(value, what: "network") {
                    if text == "none" {
                        layer.network = (.none, here(value))
                    } else if ["no", "off", "false", "disabled", "loopback"].contains(text) {
                        diag.error(value, "\"\(text)\" is not a network mode; write \"none\" for a private network namespace with loopback only")
                    } else {
                        diag.error(value, "network mode \"\(text)\" is not supported yet; the only mode is \"none\" (a private network namespace with loopback only)")
                    }
                }
            case "environment":
                parseEnvironment(value, into: &layer)
            case "limits":
                layer.limits = parseLimits(value)
            default:
                break
            }
        }
        if !sawVersion && !diag.suggestedKeys.contains("version") {
            diag.error(Loc(line: 1, column: 1), "missing required key \"version\" (write \"version: 1\" at the top)")
        }
        return layer
    }

    private func containsAlias(_ node: YAMLNode) -> Bool {
        switch node {
        case .alias: return true
        case .scalar: return false
        case .sequence(let s): return s.contains(where: containsAlias)
        case .mapping(let m): return m.contains { containsAlias($0.key) || containsAlias($0.value) }
        }
    }

    /// "YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at line 2)".
    static func describe(_ error: YAMLError) -> String {
        guard let context = error.context, !context.isEmpty, let mark = error.contextMark else {
            return "YAML syntax error: \(error.problem)"
        }
        return "YAML syntax error: \(error.problem) (\(context) at line \(mark.line))"
    }

    // MARK: Actions and names

    func parseAction(_ node: YAMLNode, what: String) -> SyscallAction? {
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
            let offset = text.firstRange(of: words[1]).map { text.distance(from: text.startIndex, to: $0.lowerBound) } ?? 0
            return parseErrno(words[1], loc: reader.loc(in: node, offset: offset)).map { .errno($0) }
        case let word?:
            if known.contains(word) {
                diag.error(node, "\"\(word)\" takes no argument; write \"\(word)\"")
            } else {
                diag.error(node, "unknown action \"\(text)\"\(diag.hint(for: word, in: known)); actions are allow, kill, log and errno NAME")
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
        diag.error(loc, "unknown errno \"\(text)\"\(diag.hint(for: text, in: PolicyConstants.errnos.keys))")
        return nil
    }

    /// Whether `name` is an x86_64 syscall; reports a precise error if not.
    func checkSyscall(_ name: String, loc: Loc) -> Bool {
        if Syscalls.number(of: name) != nil { return true }
        let anyArch = seccomp_syscall_resolve_name(name)
        if anyArch != __NR_SCMP_ERROR {
            diag.error(loc, "\"\(name)\" is not a system call on x86_64")
        } else {
            diag.error(loc, "unknown system call \"\(name)\"\(diag.hint(for: name, in: Syscalls.allNames))")
        }
        return false
    }

    // MARK: seccomp

    static let clone3Explanation =
        "clone3 always fails with ENOSYS so that the C library falls back to clone, whose flags the filter can check (clone3 passes its flags in memory, which seccomp cannot read)"

    /// Checks and expands one list (`allow`, `kill`, …); `~` entries are kept for the merge.
    func parseList(_ node: YAMLNode, section: String, errnoValue: Int32? = nil) -> [PolicyLayer.ListItem] {
        var out: [PolicyLayer.ListItem] = []
        guard let items = reader.stringList(node, what: section) else { return out }
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
                    diag.error(loc, "unknown syscall group \"\(name)\"\(diag.hint(for: name, in: SyscallGroups.names))")
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
            out.append(.init(remove: remove, names: names, item: name, loc: here(loc)))
        }
        return out
    }

    func parseSeccomp(_ node: YAMLNode, into layer: inout PolicyLayer) {
        guard let entries = reader.mapping(node, what: "seccomp", keys: Self.seccompKeys) else { return }
        for (key, _, value) in entries {
            switch key {
            case "default":
                if let action = parseAction(value, what: "the default action") {
                    layer.defaultAction = (action, here(value))
                }
            case "allow-exec-after-start":
                guard let text = reader.string(value, what: "allow-exec-after-start") else { continue }
                switch text {
                case "true": layer.allowExecAfterStart = (true, here(value))
                case "false": layer.allowExecAfterStart = (false, here(value))
                default:
                    diag.error(value, "allow-exec-after-start is true or false, found \"\(text)\"")
                }
            case "memory-deny-write-execute":
                guard let text = reader.string(value, what: "memory-deny-write-execute") else { continue }
                switch text {
                case "true": layer.memoryDenyWriteExecute = (true, here(value))
                case "false": layer.memoryDenyWriteExecute = (false, here(value))
                default:
                    diag.error(value, "memory-deny-write-execute is true or false, found \"\(text)\"")
                }
            case "allow": layer.lists.append(.init(section: "allow", action: .allow, items: parseList(value, section: "allow")))
            case "log": layer.lists.append(.init(section: "log", action: .log, items: parseList(value, section: "log")))
            case "kill": layer.lists.append(.init(section: "kill", action: .killProcess, items: parseList(value, section: "kill")))
            case "errno":
                guard let groups = reader.dataMapping(value, what: "errno") else { continue }
                for (errnoName, errnoLoc, listNode) in groups {
                    guard let e = parseErrno(errnoName, loc: errnoLoc) else { continue }
                    let section = "errno \(errnoName)"
                    layer.lists.append(.init(section: section, action: .errno(e), items: parseList(listNode, section: section, errnoValue: e)))
                }
            case "rules":
                layer.rules = parseRules(value)
            default:
                break
            }
        }
    }

    func parseRules(_ node: YAMLNode) -> [PolicyLayer.RuleEntry] {
        guard let items = reader.list(node, what: "rules") else { return [] }
        var out: [PolicyLayer.RuleEntry] = []
        var unconditional: [String: Loc] = [:]
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
            if conditions.isEmpty {
                if let earlier = unconditional[syscall] {
                    diag.error(item, "a second rule without conditions for \(syscall) (the first is at line \(earlier.line))")
                    continue
                }
                unconditional[syscall] = Loc(item)
            }
            let reason = why?.trimmingTrailingNewlines.trimmedBlanks
            out.append(.init(syscall: syscall, action: action, conditions: conditions,
                             why: reason?.isEmpty == false ? reason : nil, loc: here(item)))
        }
        return out
    }
}
