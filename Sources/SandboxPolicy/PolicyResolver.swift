import Glibc
import SandboxSystem

/// Follows `extends:` and `include:`, merges the files into one policy, and checks what can only
/// be checked on the whole (the default action, execve, dangerous system calls, rules against
/// lists). Every problem points into the file it comes from.
///
/// Merge order: for each file, first the policy it `extends` (itself fully resolved), then each
/// file it `include`s in order (each fully resolved), then the file itself. Later files win:
/// lists concatenate (so a later `~name` removes what an earlier file added to the same list),
/// the strongest list action still wins, scalars (default action, description, network, each
/// limit, each `environment.set` variable, a rule without conditions, a mount destination) take
/// the value of the last file that sets them. See docs/policy-format.md, "extends and include".
final class PolicyResolver {
    /// How many files deep `extends`/`include` may nest below the file being loaded.
    static let maxDepth = 8

    static let execAfterStartExplanation =
        "allow-exec-after-start is false: the supervisor lets exactly one execve through (the sandbox's own launch of its program) and kills the sandbox on any later execve or execveat"

    let sink = DiagnosticSink()
    /// What outside the text decided the result (files read, names looked up, canonical paths).
    var resolution = PolicyResolution()
    private let explicitSearchPath: PolicySearchPath?
    private var cachedSearchPath: PolicySearchPath?
    /// Canonical path → the parsed file (`.some(nil)` when it could not be read or parsed).
    /// Keyed by the canonical path's bytes: two spellings of one character are two files.
    private var cache: [[UInt8]: PolicyLayer?] = [:]
    /// Some file could not be followed (missing, cycle, too deep, unparsable): checks of the merged
    /// seccomp section would only report the consequences.
    private var incomplete = false

    init(searchPath: PolicySearchPath?) {
        self.explicitSearchPath = searchPath
    }

    private var searchPath: PolicySearchPath {
        if let explicitSearchPath { return explicitSearchPath }
        if let cachedSearchPath { return cachedSearchPath }
        let path = PolicySearchPath.default(executablePath: PolicySearchPath.currentExecutable())
        cachedSearchPath = path
        return path
    }

    static func canonical(_ path: String) -> String {
        if let resolved = SystemFiles.realPath(path) { return resolved }
        // Not there (yet): absolute and tidied, as realpath would give it.
        if FilePaths.isAbsolute(path) { return normalize(path) }
        return normalize(FilePaths.join(SystemFiles.currentDirectory() ?? "/", path))
    }

    /// Removes `.` components and folds `dir/..` (textually, as a shell would show the path).
    static func normalize(_ path: String) -> String {
        let absolute = FilePaths.isAbsolute(path)
        // Components and dots by bytes, as the kernel reads the path.
        func isDots(_ part: Substring, _ count: Int) -> Bool { part.utf8.count == count && part.utf8.allSatisfy { $0 == UInt8(ascii: ".") } }
        var parts: [Substring] = []
        for part in FilePaths.components(path) {
            if isDots(part, 1) { continue }
            if isDots(part, 2), let last = parts.last, !isDots(last, 2) {
                parts.removeLast()
                continue
            }
            if isDots(part, 2), absolute, parts.isEmpty { continue }
            parts.append(part)
        }
        let joined = parts.joined(separator: "/")
        return absolute ? "/" + joined : (joined.isEmpty ? "." : joined)
    }

    private func error(_ loc: Loc, _ message: String) {
        sink.append(PolicyError(file: loc.file ?? "", line: loc.line, column: loc.column, message: message))
    }

    // MARK: Loading

    /// Resolves the policy in `text` (the contents of `sourcePath`, or of a policy named `name`).
    func resolve(text: String, name: String, sourcePath: String?) -> Policy? {
        let file = sourcePath ?? name
        let diag = Diagnostics(file: file, sink: sink)
        guard let top = PolicyParser(diag: diag).parse(yaml: text) else { return nil }
        let key = sourcePath.map(Self.canonical) ?? "<\(name)>"
        if let sourcePath { resolution.recordCanonical(sourcePath, key) }
        cache[Array(key.utf8)] = .some(top)
        var seen: Set<[UInt8]> = []
        var layers: [PolicyLayer] = []
        expand(top, key: key, chain: [(key, file)], into: &layers, seen: &seen)
        return merge(layers, name: name, sourcePath: sourcePath, top: diag)
    }

    private func expand(
        _ layer: PolicyLayer, key: String, chain: [(key: String, file: String)],
        into out: inout [PolicyLayer], seen: inout Set<[UInt8]>
    ) {
        var references: [(kind: String, ref: PolicyLayer.Reference)] = []
        if let base = layer.extends { references.append(("extends", base)) }
        references += layer.includes.map { ("include", $0) }
        for (kind, ref) in references {
            guard let (path, subKey) = locate(ref, kind: kind, from: layer, key: key) else {
                incomplete = true
                continue
            }
            if let start = chain.firstIndex(where: { FilePaths.isSame($0.key, subKey) }) {
                let cycle = (chain[start...].map(\.file) + [path]).joined(separator: " → ")
                error(ref.loc, "\(kind) cycle: \(cycle); a policy cannot extend or include itself, directly or through other files")
                incomplete = true
                continue
            }
            if seen.contains(Array(subKey.utf8)) { continue }  // reached before (not a cycle): merged once, at its first place
            if chain.count > Self.maxDepth {
                let path = (chain.map(\.file) + [path]).joined(separator: " → ")
                error(ref.loc, "\(kind) nests too deeply: \(path); extends and include may nest at most \(Self.maxDepth) files deep")
                incomplete = true
                continue
            }
            guard let sub = parsed(path: path, key: subKey, ref: ref, kind: kind) else {
                incomplete = true
                continue
            }
            expand(sub, key: subKey, chain: chain + [(subKey, path)], into: &out, seen: &seen)
        }
        if seen.insert(Array(key.utf8)).inserted { out.append(layer) }
    }

    /// The file a reference names: a path (relative to the referring file's directory) or a name
    /// on the search path (skipping the referring file itself, so that an admin's
    /// `/etc/extsandbox/policies/standard.yaml` can say `extends: standard` for the shipped one).
    private func locate(_ ref: PolicyLayer.Reference, kind: String, from layer: PolicyLayer, key: String) -> (String, String)? {
        let target = ref.target
        let path: String
        if PolicyLoader.isPath(target) {
            if FilePaths.isAbsolute(target) {
                path = Self.normalize(target)
            } else {
                let dir = FilePaths.directory(of: layer.file)
                path = Self.normalize(dir.isEmpty ? target : dir + "/" + target)
            }
        } else {
            do {
                path = try searchPath.locate(name: target, excluding: key)
                resolution.recordLookup(name: target, excluding: key, file: path, directories: searchPath.directories)
            } catch {
                self.error(ref.loc, "cannot \(kind == "extends" ? "extend" : kind) \"\(target)\": \(error.message)")
                return nil
            }
        }
        let canonical = Self.canonical(path)
        resolution.recordCanonical(path, canonical)
        return (path, canonical)
    }

    private func parsed(path: String, key: String, ref: PolicyLayer.Reference, kind: String) -> PolicyLayer? {
        if let cached = cache[Array(key.utf8)] { return cached }
        let text: String
        do {
            let read = try PolicyLoader.readFile(path)
            text = read.text
            resolution.recordFile(path, read.bytes)
        } catch {
            self.error(ref.loc, "cannot \(kind == "extends" ? "extend" : kind) \"\(ref.target)\": \(path): \(error.message)")
            cache[Array(key.utf8)] = .some(nil)
            return nil
        }
        let layer = PolicyParser(diag: Diagnostics(file: path, sink: sink)).parse(yaml: text)
        cache[Array(key.utf8)] = .some(layer)
        return layer
    }

    // MARK: Merging

    private func merge(_ layers: [PolicyLayer], name: String, sourcePath: String?, top: Diagnostics) -> Policy? {
        var policy = Policy(name: name, sourcePath: sourcePath, seccomp: SeccompPolicy())
        policy.composedFrom = layers.map(\.file)
        for layer in layers {
            if let d = layer.description { policy.description = d }
            if let n = layer.network { policy.network = n.mode }
        }

        // Mounts: in order; a destination mounted by an earlier file is replaced in its place.
        var mounts: [PolicyLayer.Mount] = []
        for layer in layers {
            for m in layer.mounts {
                if let i = mounts.firstIndex(where: { FilePaths.isSame($0.destination, m.destination) }) {
                    mounts[i] = m
                } else {
                    mounts.append(m)
                }
            }
        }
        var masked: [String] = []
        for layer in layers {
            // By bytes, as the kernel compares names: `==` takes two spellings of one character
            // as one path, and would drop a mask of the other file.
            for path in layer.masked where !masked.contains(where: { FilePaths.isSame($0, path) }) { masked.append(path) }
        }
        policy.filesystem = FilesystemPolicy(mounts: mounts.map(\.entry), masked: masked)

        var env = EnvironmentPolicy()
        for layer in layers {
            for name in layer.pass where !env.pass.contains(name) { env.pass.append(name) }
            for (name, value) in layer.set { env.set[name] = value }
        }
        policy.environment = env

        var limits = ResourceLimits()
        for layer in layers {
            for (key, value) in layer.limits {
                switch key {
                case "memory": limits.memoryBytes = value
                case "memory-scope": limits.memoryScope = MemoryScope.allCases[Int(value ?? 0)]
                case "processes": limits.processes = value
                case "cpu-seconds": limits.cpuSeconds = value
                case "open-files": limits.openFiles = value
                case "file-size": limits.fileSizeBytes = value
                default: limits.wallClockSeconds = value
                }
            }
        }
        policy.limits = limits

        let seccomp = mergeSeccomp(layers, top: top)
        guard sink.errors.isEmpty, let seccomp else { return nil }
        policy.seccomp = seccomp
        return policy
    }

    struct Origin {
        var section: String
        var item: String
        var loc: Loc
        func text(seenFrom other: Loc) -> String { "by \"\(item)\" in \(section) (\(loc.place(seenFrom: other)))" }
    }

    private func mergeSeccomp(_ layers: [PolicyLayer], top: Diagnostics) -> SeccompPolicy? {
        let errorsBefore = sink.errors.count
        if incomplete { return nil }
        let broken = layers.contains { $0.seccompBroken }
        guard let seccompLoc = layers.last(where: { $0.seccompLoc != nil })?.seccompLoc else {
            if !top.suggestedKeys.contains("seccomp") {
                let more = layers.count > 1 ? " (neither this file nor the files it extends or includes has one)" : ""
                top.error(Loc(line: 1, column: 1), "missing required section \"seccomp\"\(more)")
            }
            return nil
        }
        var defaultSetting: (action: SyscallAction, loc: Loc)?
        var execSetting: (value: Bool, loc: Loc)?
        var memoryDenyWriteExecute = false
        for layer in layers {
            if let d = layer.defaultAction { defaultSetting = d }
            if let e = layer.allowExecAfterStart { execSetting = e }
            if let m = layer.memoryDenyWriteExecute { memoryDenyWriteExecute = m.value }
        }
        guard let (defaultAction, defaultLoc) = defaultSetting else {
            if !broken {
                error(seccompLoc, "seccomp needs a \"default\" action (kill, allow, log or errno NAME) for the system calls no list names")
            }
            return nil
        }
        let allowExec = execSetting?.value ?? true

        // Lists: concatenated across files per action, then applied in order (`~` removes).
        var order: [SyscallAction] = []
        var entries: [SyscallAction: [(section: String, item: PolicyLayer.ListItem)]] = [:]
        for layer in layers {
            for list in layer.lists {
                if entries[list.action] == nil { order.append(list.action) }
                entries[list.action, default: []] += list.items.map { (list.section, $0) }
            }
        }
        // Plain (unconditional) actions from the lists: the strongest wins (kill > errno > log > allow).
        var plain: [String: (action: SyscallAction, origin: Origin)] = [:]
        for action in order {
            var map: [String: Origin] = [:]
            for (section, item) in entries[action]! {
                for name in item.names {
                    if item.remove {
                        map[name] = nil
                    } else if map[name] == nil {
                        map[name] = Origin(section: section, item: item.item, loc: item.loc)
                    }
                }
            }
            for sys in map.keys.sorted() {
                let origin = map[sys]!
                if let existing = plain[sys] {
                    if case .errno(let a) = existing.action, case .errno(let b) = action, a != b {
                        error(origin.loc, "\(sys) would fail with \(action) here but with \(existing.action) \(existing.origin.text(seenFrom: origin.loc)); give it one errno")
                    } else if action.strength > existing.action.strength {
                        plain[sys] = (action, origin)
                    }
                } else {
                    plain[sys] = (action, origin)
                }
            }
        }

        // Rules: a later file's rule without conditions replaces an earlier one; conditional
        // rules concatenate and fall back to the plain action.
        var unconditional: [String: PolicyLayer.RuleEntry] = [:]
        var conditional: [String: [PolicyLayer.RuleEntry]] = [:]
        for layer in layers {
            for rule in layer.rules {
                if let reason = SeccompRuleCheck.refusedByBuiltins(SyscallRule(syscall: rule.syscall, action: rule.action, conditions: rule.conditions)) {
                    error(rule.loc, "this rule cannot let \(rule.syscall) run: \(reason)")
                    continue
                }
                if rule.conditions.isEmpty {
                    unconditional[rule.syscall] = rule
                } else {
                    conditional[rule.syscall, default: []].append(rule)
                }
            }
        }
        for sys in conditional.keys.sorted() {
            let fallback: SyscallAction
            let fallbackText: (Loc) -> String
            if let u = unconditional[sys] {
                fallback = u.action
                fallbackText = { "by the rule without conditions at \(u.loc.place(seenFrom: $0))" }
            } else if let p = plain[sys] {
                fallback = p.action
                fallbackText = { p.origin.text(seenFrom: $0) }
            } else {
                fallback = defaultAction
                fallbackText = { _ in "by the default action" }
            }
            let ordered = RulePrecedence.ordered(conditional[sys]!, action: \.action)
            for index in SeccompRuleCheck.rulesWithoutEffect(ordered.map(\.action), fallback: fallback) {
                let rule = ordered[index]
                var fix = ""
                if let p = plain[sys], unconditional[sys] == nil {
                    fix = "; remove it from \(p.origin.section) (for example with \"~\(sys)\") so that only the conditions decide"
                }
                let below = index + 1 < ordered.count ? " (and no rule after it in precedence gives another action)" : ""
                error(rule.loc, "this rule has no effect: \(sys) is already \(rule.action.pastTense) \(fallbackText(rule.loc))\(below)\(fix)")
            }
        }

        // No exec after start: execve and execveat are the supervisor's; naming them otherwise contradicts.
        let execCalls = SeccompRuleCheck.execCalls
        if !allowExec {
            for sys in execCalls {
                let why = "with allow-exec-after-start: false (\(execSetting!.loc.place(seenFrom: seccompLoc))) the supervisor decides \(sys): it lets the sandbox's own launch through and kills any later exec"
                if let u = unconditional[sys] { error(u.loc, "a rule cannot change \(sys): \(why)") }
                for c in conditional[sys] ?? [] { error(c.loc, "a rule cannot change \(sys): \(why)") }
                if let p = plain[sys], !p.origin.item.hasPrefix("@"), p.action != .killProcess {
                    error(p.origin.loc, "\(sys) cannot be listed in \(p.origin.section): \(why); remove it")
                }
            }
        }

        // What follows needs complete lists (not checked when the section has problems).
        guard sink.errors.count == errorsBefore, !broken else { return nil }

        // execve must run: the sandbox execs its program after loading the filter.
        if allowExec {
            let execveAction = unconditional["execve"]?.action ?? plain["execve"]?.action ?? defaultAction
            if !SeccompRuleCheck.execveRuns(fallback: execveAction, hasConditionalRules: conditional["execve"] != nil) {
                let loc = conditional["execve"]?.first?.loc ?? unconditional["execve"]?.loc ?? plain["execve"]?.origin.loc
                    ?? defaultLoc
                error(loc, "execve must be allowed without conditions: the sandbox starts its program with execve after loading the filter (add \"execve\" or \"@default\" to allow; to forbid running other programs later, set allow-exec-after-start: false)")
            }
        }

        checkDangerous(plain: plain, unconditional: unconditional, conditional: conditional,
                       defaultAction: defaultAction, defaultLoc: defaultLoc)
        guard sink.errors.count == errorsBefore else { return nil }

        var out: [SyscallRule] = []
        var names = Set(plain.keys).union(unconditional.keys).union(conditional.keys).union(["clone3"])
        if !allowExec { names.formUnion(execCalls) }
        for sys in names.sorted() {
            if sys == "clone3" {
                out.append(SyscallRule(syscall: "clone3", action: .errno(38), justification: PolicyParser.clone3Explanation))
                continue
            }
            if !allowExec && execCalls.contains(sys) {
                out.append(SyscallRule(syscall: sys, action: .killProcess, justification: Self.execAfterStartExplanation))
                continue
            }
            if let u = unconditional[sys] {
                out.append(SyscallRule(syscall: sys, action: u.action, justification: u.why))
            } else if let p = plain[sys] {
                out.append(SyscallRule(syscall: sys, action: p.action))
            }
            // In the order they are tried (strongest action first), so the model reads as it runs.
            for c in RulePrecedence.ordered(conditional[sys] ?? [], action: \.action) {
                out.append(SyscallRule(syscall: sys, action: c.action, conditions: c.conditions, justification: c.why))
            }
        }
        return SeccompPolicy(
            defaultAction: defaultAction, rules: out, allowExecAfterStart: allowExec,
            memoryDenyWriteExecute: memoryDenyWriteExecute)
    }

    /// A dangerous system call may run only through a rule that says why.
    private func checkDangerous(
        plain: [String: (action: SyscallAction, origin: Origin)],
        unconditional: [String: PolicyLayer.RuleEntry], conditional: [String: [PolicyLayer.RuleEntry]],
        defaultAction: SyscallAction, defaultLoc: Loc
    ) {
        func runs(_ a: SyscallAction) -> Bool { a == .allow || a == .log }
        func ruleHint(_ sys: String) -> String { "{syscall: \(sys), action: allow, why: \"…\"}" }
        var byOrigin: [(origin: Origin, syscalls: [String])] = []
        var byDefault: [String] = []
        for sys in DangerousSyscalls.names where Syscalls.number(of: sys) != nil {
            let reason = DangerousSyscalls.reasons[sys]!
            for rule in conditional[sys] ?? [] where runs(rule.action) && rule.why == nil {
                error(rule.loc, "\(sys) is a dangerous system call (\(reason)); a rule that lets it run needs a \"why:\" that says why this policy must allow it")
            }
            if let rule = unconditional[sys] {
                if runs(rule.action) && rule.why == nil {
                    error(rule.loc, "\(sys) is a dangerous system call (\(reason)); a rule that lets it run needs a \"why:\" that says why this policy must allow it")
                }
                continue
            }
            if let p = plain[sys] {
                guard runs(p.action) else { continue }
                if let i = byOrigin.firstIndex(where: { $0.origin.loc == p.origin.loc && $0.origin.item == p.origin.item }) {
                    byOrigin[i].syscalls.append(sys)
                } else {
                    byOrigin.append((p.origin, [sys]))
                }
            } else if runs(defaultAction) {
                byDefault.append(sys)
            }
        }
        for (origin, syscalls) in byOrigin {
            if syscalls == [origin.item] {
                let sys = origin.item
                error(origin.loc, "\(sys) is a dangerous system call (\(DangerousSyscalls.reasons[sys]!)); to let it run, replace this entry with a rule that says why: \(ruleHint(sys))")
            } else {
                error(origin.loc, "\"\(origin.item)\" in \(origin.section) lets dangerous system calls run: \(syscalls.joined(separator: ", ")); remove them (\"~\(syscalls[0])\"), kill them, or allow each with a rule that says why: \(ruleHint(syscalls[0]))")
            }
        }
        if !byDefault.isEmpty {
            error(defaultLoc, "the default action \(defaultAction) lets dangerous system calls run: \(byDefault.joined(separator: ", ")); kill them (kill: [\(byDefault[0]), …]) or allow each with a rule that says why: \(ruleHint(byDefault[0]))")
        }
    }
}
