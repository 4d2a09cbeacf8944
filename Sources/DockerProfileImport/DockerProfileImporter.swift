import FoundationEssentials
import Glibc
import SandboxPolicy
import SandboxSystem
import YAMLSupport

/// Converts a Docker/OCI seccomp profile (the JSON that `docker run --security-opt seccomp=FILE`
/// and containerd take) into an extsandbox policy file, for `extsandbox policy import-docker`.
///
/// What maps: `defaultAction` (+ `defaultErrnoRet`), `syscalls[]` entries with `names` (or the
/// old `name`), `action` (+ `errnoRet`), `args` (`index`, `value`, `valueTwo`, `op` =
/// `SCMP_CMP_EQ/NE/LT/LE/GT/GE/MASKED_EQ`), `comment`, `includes`/`excludes` by capability and
/// architecture (the sandbox has no capabilities and runs x86_64). What does not map is reported
/// as a comment in the output and as a warning: other architectures, `flags`, `listenerPath`,
/// `SCMP_ACT_NOTIFY`, names that are not x86_64 system calls, `clone3` (always ENOSYS in
/// extsandbox), two comparisons of one argument in one entry, and dangerous system calls that
/// the profile allows (extsandbox wants a written reason for each: they are written out as
/// commented rules to complete).
public enum DockerProfileImporter {
    public struct Output: Sendable {
        /// The policy file.
        public var yaml: String
        /// What did not map, and problems of the result, one line each.
        public var warnings: [String]
    }

    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var message: String
        public var description: String { message }
    }

    /// Converts `json` (the profile's bytes); `source` names it in the header comment.
    public static func convert(json: Data, source: String) throws(Failure) -> Output {
        let object: JSONValue
        do {
            object = try JSONDecoder().decode(JSONValue.self, from: json)
        } catch {
            throw Failure(message: "\(source): not valid JSON: \(JSONValue.describe(error))")
        }
        guard let profile = object.object else {
            throw Failure(message: "\(source): a seccomp profile is a JSON object with \"defaultAction\" and \"syscalls\"")
        }
        var converter = Converter(source: source)
        try converter.run(profile)
        return converter.output()
    }

    struct Converter {
        let source: String
        var warnings: [String] = []
        var notes: [String] = []
        var defaultAction: SyscallAction = .killProcess
        /// Unconditional entries: action → names, in profile order.
        var lists: [(action: SyscallAction, names: [String], comments: [String])] = []
        var rules: [(syscall: String, action: SyscallAction, when: [String], comment: String?)] = []
        var dangerous: [(syscall: String, action: SyscallAction, when: [String])] = []

        init(source: String) { self.source = source }

        mutating func warn(_ text: String) {
            warnings.append(text)
            notes.append(text)
        }

        static let nativeArches: Set<String> = ["SCMP_ARCH_X86_64", "amd64", "x86_64"]

        func action(_ text: String?, errnoRet: JSONValue?, fallbackErrno: Int32 = 1) -> (SyscallAction?, String?) {
            switch text {
            case "SCMP_ACT_ALLOW": return (.allow, nil)
            case "SCMP_ACT_LOG": return (.log, nil)
            case "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS": return (.killProcess, nil)
            case "SCMP_ACT_KILL_THREAD": return (.killProcess, "SCMP_ACT_KILL_THREAD becomes kill: extsandbox kills the whole sandbox")
            case "SCMP_ACT_TRAP": return (.killProcess, "SCMP_ACT_TRAP (SIGSYS to the caller) becomes kill")
            case "SCMP_ACT_TRACE": return (.errno(38), "SCMP_ACT_TRACE becomes errno ENOSYS (what the kernel answers when no tracer is attached)")
            case "SCMP_ACT_ERRNO":
                let value = Self.number(errnoRet).flatMap { Int32(exactly: Int64(bitPattern: $0)) } ?? fallbackErrno
                return ((1...4095).contains(value) ? .errno(value) : .errno(1), nil)
            case let other?: return (nil, "action \(other) has no equivalent in extsandbox")
            case nil: return (nil, "an entry without \"action\"")
            }
        }

        /// A whole number; negative ones as their 64-bit two's complement (as libseccomp reads them).
        static func number(_ value: JSONValue?) -> UInt64? {
            switch value {
            case .unsigned(let v)?: return v
            case .signed(let v)?: return UInt64(bitPattern: v)
            case .double(let v)? where v.rounded() == v:
                if let u = UInt64(exactly: v) { return u }
                return Int64(exactly: v).map { UInt64(bitPattern: $0) }
            default: return nil
            }
        }

        static func hex(_ v: UInt64) -> String { v < 10 ? "\(v)" : "0x" + String(v, radix: 16) }

        mutating func run(_ profile: [String: JSONValue]) throws(Failure) {
            let (defaultAct, defaultNote) = action(profile["defaultAction"]?.string, errnoRet: profile["defaultErrnoRet"])
            guard let defaultAct else {
                throw Failure(message: "\(source): \(defaultNote ?? "no defaultAction"); a profile needs \"defaultAction\"")
            }
            if let defaultNote { warn("defaultAction: \(defaultNote)") }
            defaultAction = defaultAct

            var arches = profile["architectures"]?.strings ?? []
            for entry in profile["archMap"]?.objects ?? [] {
                if let a = entry["architecture"]?.string { arches.append(a) }
                arches += entry["subArchitectures"]?.strings ?? []
            }
            // Podman's profile lists some sub-architectures under two architectures: name each once.
            var named: Set<String> = []
            let foreign = arches.filter { !Self.nativeArches.contains($0) && named.insert($0).inserted }
            if !foreign.isEmpty {
                notes.append("architectures \(foreign.joined(separator: ", ")) are not imported: extsandbox filters x86_64 and kills every other architecture's system calls")
            }
            if let flags = profile["flags"]?.strings, !flags.isEmpty {
                warn("flags \(flags.joined(separator: ", ")) are not imported: extsandbox chooses the filter flags itself")
            }
            if profile["listenerPath"] != nil {
                warn("listenerPath is not imported: the extsandbox supervisor is the only listener")
            }

            let entries = profile["syscalls"]?.objects ?? []
            for (index, entry) in entries.enumerated() {
                let label = "syscalls[\(index)]"
                var names = entry["names"]?.strings ?? []
                if let single = entry["name"]?.string { names.append(single) }
                if names.isEmpty { continue }
                let shown = names.count > 4 ? names.prefix(3).joined(separator: ", ") + ", …" : names.joined(separator: ", ")

                if let includes = entry["includes"]?.object {
                    if let caps = includes["caps"]?.strings, !caps.isEmpty {
                        notes.append("\(label) (\(shown)) skipped: only for containers with \(caps.joined(separator: ", ")); the sandbox has no capabilities")
                        continue
                    }
                    if let a = includes["arches"]?.strings, !a.isEmpty, !a.contains(where: Self.nativeArches.contains) {
                        notes.append("\(label) (\(shown)) skipped: only for \(a.joined(separator: ", "))")
                        continue
                    }
                    if let k = includes["minKernel"]?.string {
                        notes.append("\(label) (\(shown)) applies to kernels \(k) and later in Docker; imported unconditionally")
                    }
                }
                if let excludes = entry["excludes"]?.object,
                    let a = excludes["arches"]?.strings, a.contains(where: Self.nativeArches.contains)
                {
                    notes.append("\(label) (\(shown)) skipped: excluded on x86_64")
                    continue
                }

                let (act, note) = action(entry["action"]?.string, errnoRet: entry["errnoRet"])
                guard let act else {
                    warn("\(label) (\(shown)) skipped: \(note ?? "")")
                    continue
                }
                if let note { notes.append("\(label) (\(shown)): \(note)") }

                var kept: [String] = []
                var foreignNames: [String] = []
                for name in names {
                    if name == "clone3" {
                        notes.append("\(label): clone3 is not imported: extsandbox always answers it with ENOSYS so that the C library uses clone, whose flags the filter can check")
                    } else if Syscalls.number(of: name) == nil {
                        foreignNames.append(name)
                    } else if !kept.contains(name) {
                        kept.append(name)
                    }
                }
                if !foreignNames.isEmpty {
                    notes.append("\(label): not x86_64 system calls, skipped: \(foreignNames.joined(separator: ", "))")
                }
                if kept.isEmpty { continue }

                // Conditions.
                var when: [String] = []
                var usable = true
                var seenArgs: Set<Int> = []
                for arg in entry["args"]?.objects ?? [] {
                    guard let argIndex = Self.number(arg["index"]).flatMap({ Int(exactly: $0) }), (0...5).contains(argIndex),
                        let value = Self.number(arg["value"]), let op = arg["op"]?.string
                    else {
                        warn("\(label) (\(shown)) skipped: an argument condition without a valid index, value or op")
                        usable = false
                        break
                    }
                    guard seenArgs.insert(argIndex).inserted else {
                        warn("\(label) (\(shown)) skipped: it compares arg\(argIndex) twice, which an extsandbox rule cannot (write two rules)")
                        usable = false
                        break
                    }
                    let two = Self.number(arg["valueTwo"]) ?? 0
                    let a = "arg\(argIndex)"
                    switch op {
                    case "SCMP_CMP_EQ": when.append("\(a) == \(Self.hex(value))")
                    case "SCMP_CMP_NE": when.append("\(a) != \(Self.hex(value))")
                    case "SCMP_CMP_LT": when.append("\(a) < \(Self.hex(value))")
                    case "SCMP_CMP_LE": when.append("\(a) <= \(Self.hex(value))")
                    case "SCMP_CMP_GT": when.append("\(a) > \(Self.hex(value))")
                    case "SCMP_CMP_GE": when.append("\(a) >= \(Self.hex(value))")
                    case "SCMP_CMP_MASKED_EQ": when.append("\(a) & \(Self.hex(value)) == \(Self.hex(two))")
                    default:
                        warn("\(label) (\(shown)) skipped: unknown comparison \(op)")
                        usable = false
                    }
                    if !usable { break }
                }
                if !usable { continue }

                let comment = entry["comment"]?.string.flatMap { $0.isEmpty ? nil : $0 }
                for name in kept where DangerousSyscalls.contains(name) && (act == .allow || act == .log) {
                    dangerous.append((name, act, when))
                }
                kept.removeAll { DangerousSyscalls.contains($0) && (act == .allow || act == .log) }
                if kept.isEmpty { continue }
                if when.isEmpty {
                    lists.append((act, kept, comment.map { [$0] } ?? []))
                } else {
                    // Profiles repeat entries (the packaged containers profile allows socket
                    // with "arg2 != 9" twice): one rule each is enough.
                    for name in kept where !rules.contains(where: { $0.syscall == name && $0.action == act && $0.when == when }) {
                        rules.append((name, act, when, comment))
                    }
                }
            }

            // A conditional rule that can never change what a call gets (its action is the
            // fallback's, and so is that of every rule after it in precedence) has no effect: drop it.
            var plain: [String: SyscallAction] = [:]
            for list in lists { for name in list.names where plain[name] == nil { plain[name] = list.action } }
            var ineffective: Set<Int> = []
            for name in Set(rules.map(\.syscall)) {
                let fallback = plain[name] ?? defaultAction
                let ordered = RulePrecedence.ordered(rules.indices.filter { rules[$0].syscall == name }) { rules[$0].action }
                for position in SeccompRuleCheck.rulesWithoutEffect(ordered.map { rules[$0].action }, fallback: fallback) {
                    ineffective.insert(ordered[position])
                }
            }
            for index in ineffective.sorted() {
                let rule = rules[index]
                notes.append("the conditional rule for \(rule.syscall) (\(rule.when.joined(separator: ", "))) is dropped: \(rule.syscall) is \(rule.action.pastTense) anyway")
            }
            rules = rules.indices.filter { !ineffective.contains($0) }.map { rules[$0] }
            if !dangerous.isEmpty {
                let names = Array(Set(dangerous.map(\.syscall))).sorted()
                warn("dangerous system calls the profile allows are written as commented-out rules (they get the default action until you uncomment them and say why): \(names.joined(separator: ", "))")
            }
            if defaultAction == .allow || defaultAction == .log {
                let named = Set(lists.flatMap(\.names)).union(rules.map(\.syscall))
                let unnamed = DangerousSyscalls.names.filter { !named.contains($0) && Syscalls.number(of: $0) != nil }
                if !unnamed.isEmpty {
                    lists.append((.errno(1), unnamed, ["Added by the import: dangerous system calls that the profile's default action would allow"]))
                    warn("the profile's default action allows everything it does not name; the dangerous system calls it does not name fail with EPERM: \(unnamed.joined(separator: ", "))")
                }
            }
        }

        func output() -> Output {
            var y: [String] = []
            y.append("# Imported from the OCI seccomp profile \(oneLine(source))")
            y.append("# (the format of Docker, Podman and containerd) by `extsandbox policy import-docker`.")
            y.append("# Review it, then check it with `extsandbox policy check`.")
            y.append("#")
            y.append("# A seccomp profile describes only the system-call filter: the filesystem, network, environment")
            y.append("# and limits sections below are a minimal starting point added by the import.")
            if !notes.isEmpty {
                y.append("#")
                y.append("# What did not map one to one:")
                // Names in notes come from the profile: one line each, or a newline in one would
                // start a key of its own in the policy.
                for note in notes { y.append("#   - " + oneLine(note)) }
            }
            y.append("")
            y.append("version: 1")
            y.append("description: \(YAMLText.quoted("Imported from the OCI seccomp profile " + FilePaths.lastComponent(source)))")
            y.append("")
            y.append("seccomp:")
            y.append("  default: \(defaultAction)")

            func emitList(_ key: String, _ action: SyscallAction, indent: String) {
                let entries = lists.filter { $0.action == action }
                guard !entries.isEmpty else { return }
                y.append("\(indent)\(key):")
                var seen: Set<String> = []
                for entry in entries {
                    for c in entry.comments { y.append("\(indent)  # \(oneLine(c))") }
                    for name in entry.names where seen.insert(name).inserted { y.append("\(indent)  - \(name)") }
                }
            }
            emitList("allow", .allow, indent: "  ")
            emitList("log", .log, indent: "  ")
            var errnos: [Int32] = []
            for list in lists { if case .errno(let e) = list.action, !errnos.contains(e) { errnos.append(e) } }
            if !errnos.isEmpty {
                y.append("  errno:")
                for e in errnos { emitList(PolicyConstants.errnoName(e) ?? String(e), .errno(e), indent: "    ") }
            }
            emitList("kill", .killProcess, indent: "  ")

            if !rules.isEmpty || !dangerous.isEmpty {
                y.append("  rules:")
                for rule in rules {
                    if let c = rule.comment { y.append("    # \(oneLine(c))") }
                    y.append("    - syscall: \(rule.syscall)")
                    y.append("      action: \(rule.action)")
                    y.append("      when: [\(rule.when.map(YAMLText.quoted).joined(separator: ", "))]")
                }
                if !dangerous.isEmpty {
                    y.append("    # Dangerous system calls that the profile allows. extsandbox lets them run only")
                    y.append("    # through a rule that says why (docs/policy-format.md, \"Dangerous system calls\"); until")
                    y.append("    # you uncomment a rule and write its reason, that call gets the default action.")
                    for d in dangerous {
                        let when = d.when.isEmpty ? "" : ", when: [\(d.when.map(YAMLText.quoted).joined(separator: ", "))]"
                        y.append("    # - { syscall: \(d.syscall), action: \(d.action)\(when), why: \"…\" }")
                    }
                }
            }
            y.append("")
            y.append("filesystem:                     # not from the profile: enough for dynamically linked programs")
            y.append("  ro-bind: [/usr]")
            y.append("  ro-bind-optional: [/bin, /lib, /lib64, /etc/ld.so.cache, /etc/localtime]")
            y.append("  tmpfs: { /tmp: 64M }")
            y.append("")
            y.append("network: none                   # not from the profile: the only mode")
            y.append("")
            y.append("environment:                    # not from the profile")
            y.append("  pass: [PATH, LANG]")
            y.append("  set: { HOME: /tmp }")
            let yaml = y.joined(separator: "\n") + "\n"

            var warnings = self.warnings
            for problem in PolicyLoader.check(yaml: yaml, name: "imported", sourcePath: "(imported policy)") {
                warnings.append("the imported policy does not load yet: \(problem)")
            }
            return Output(yaml: yaml, warnings: warnings)
        }

        /// Text for a comment: one line, and only characters a YAML file may contain (DEL, the
        /// C0 and C1 control characters but tab, U+FFFE and U+FFFF are not allowed anywhere in
        /// it, comments included), the others replaced by U+FFFD.
        func oneLine(_ text: String) -> String {
            let line = text.split(whereSeparator: \.isNewline).joined(separator: " ")
            var out = String.UnicodeScalarView()
            for scalar in line.unicodeScalars { out.append(YAMLText.isPrintable(scalar) ? scalar : "\u{FFFD}") }
            return String(out)
        }
    }
}
