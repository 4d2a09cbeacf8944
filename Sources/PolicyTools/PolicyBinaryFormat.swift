import SandboxPolicy

/// A compact binary form of a resolved ``Policy`` and of the cache entry the CLI keeps of it
/// (``PolicyCacheEntry``), so that `extsandbox exec` can skip YAML, validation and merging when
/// nothing changed.
///
/// Written by hand over bytes with concrete types: the decoder runs in a cold process on every
/// `extsandbox exec`, where Codable (and every new generic instantiation or dynamic cast, each a
/// scan of the protocol conformance records) costs milliseconds. It is strict: lengths are
/// bounds-checked, every tag and boolean must be a known value, dictionary keys must be sorted and
/// unique, and the data must end exactly where the format does. Anything else decodes to `nil`.
///
/// Integers are little-endian. `str` and `bytes` are a u32 length and that many bytes (`str`
/// valid UTF-8); a list is a u32 count and its elements; `opt` is a byte 0 (absent) or 1 and the
/// value.
///
///     policy      = str name, opt str sourcePath, str description, seccomp, filesystem,
///                   u8 network (0 = none), environment, limits, list str composedFrom
///     seccomp     = action default, list rule, u8 allowExecAfterStart (0/1), u8 memoryDenyWriteExecute (0/1)
///     rule        = str syscall, action, list condition, opt str justification
///     action      = u8 0 allow | 1 errno, u32 errno | 2 kill | 3 log
///     condition   = u8 index (0…5), u8 op (0 == | 1 != | 2 < | 3 <= | 4 > | 5 >= | 6 masked, u64 mask), u64 value
///     filesystem  = list mount, list str masked
///     mount       = u8 0 bind, str source, str destination, u8 writable, u8 optional | u8 1 tmpfs, str destination, u64 size
///     environment = list str pass, list (str name, str value) set (sorted by name, unique)
///     limits      = opt u64 memory, processes, cpu-seconds, open-files, file-size, wall-clock,
///                   u8 memory-scope (0 sandbox | 1 per-process)
enum PolicyBinaryFormat {
    static func encode(_ policy: Policy, into w: inout ByteWriter) {
        w.string(policy.name)
        w.optionalString(policy.sourcePath)
        w.string(policy.description)

        encode(policy.seccomp.defaultAction, into: &w)
        w.count(policy.seccomp.rules.count)
        for rule in policy.seccomp.rules {
            w.string(rule.syscall)
            encode(rule.action, into: &w)
            w.count(rule.conditions.count)
            for condition in rule.conditions {
                w.u8(UInt8(truncatingIfNeeded: condition.index))
                switch condition.op {
                case .equal: w.u8(0)
                case .notEqual: w.u8(1)
                case .less: w.u8(2)
                case .lessOrEqual: w.u8(3)
                case .greater: w.u8(4)
                case .greaterOrEqual: w.u8(5)
                case .maskedEqual(let mask):
                    w.u8(6)
                    w.u64(mask)
                }
                w.u64(condition.value)
            }
            w.optionalString(rule.justification)
        }
        w.bool(policy.seccomp.allowExecAfterStart)
        w.bool(policy.seccomp.memoryDenyWriteExecute)

        w.count(policy.filesystem.mounts.count)
        for mount in policy.filesystem.mounts {
            switch mount {
            case .bind(let source, let destination, let writable, let optional):
                w.u8(0)
                w.string(source)
                w.string(destination)
                w.bool(writable)
                w.bool(optional)
            case .tmpfs(let destination, let sizeBytes):
                w.u8(1)
                w.string(destination)
                w.u64(sizeBytes)
            }
        }
        w.strings(policy.filesystem.masked)

        switch policy.network {
        case .none: w.u8(0)
        }

        w.strings(policy.environment.pass)
        let names = policy.environment.set.keys.sorted()
        w.count(names.count)
        for name in names {
            w.string(name)
            w.string(policy.environment.set[name]!)
        }

        let limits = policy.limits
        for value in [limits.memoryBytes, limits.processes, limits.cpuSeconds, limits.openFiles,
                      limits.fileSizeBytes, limits.wallClockSeconds] {
            w.optionalU64(value)
        }
        w.u8(limits.memoryScope == .perProcess ? 1 : 0)
        w.strings(policy.composedFrom)
    }

    /// The policy at the reader's position, or `nil` (and the reader marked failed) when the
    /// bytes are not exactly a policy of this format.
    static func decodePolicy(from r: inout ByteReader) -> Policy? {
        let name = r.string()
        let sourcePath = r.optionalString()
        let description = r.string()

        let defaultAction = decodeAction(from: &r)
        var rules: [SyscallRule] = []
        let ruleCount = r.count()
        rules.reserveCapacity(ruleCount)
        for _ in 0..<ruleCount where !r.failed {
            let syscall = r.string()
            let action = decodeAction(from: &r)
            var conditions: [ArgumentCondition] = []
            for _ in 0..<r.count() where !r.failed {
                let index = Int(r.u8())
                if index > 5 { r.failed = true }
                let op: ArgumentCondition.Operator
                switch r.u8() {
                case 0: op = .equal
                case 1: op = .notEqual
                case 2: op = .less
                case 3: op = .lessOrEqual
                case 4: op = .greater
                case 5: op = .greaterOrEqual
                case 6: op = .maskedEqual(mask: r.u64())
                default:
                    op = .equal
                    r.failed = true
                }
                conditions.append(ArgumentCondition(index: index, op: op, value: r.u64()))
            }
            let justification = r.optionalString()
            rules.append(SyscallRule(syscall: syscall, action: action, conditions: conditions, justification: justification))
        }
        let allowExec = r.bool()
        let memoryDenyWriteExecute = r.bool()

        var mounts: [MountEntry] = []
        for _ in 0..<r.count() where !r.failed {
            switch r.u8() {
            case 0:
                let source = r.string()
                let destination = r.string()
                let writable = r.bool()
                let optional = r.bool()
                mounts.append(.bind(source: source, destination: destination, writable: writable, optional: optional))
            case 1:
                let destination = r.string()
                mounts.append(.tmpfs(destination: destination, sizeBytes: r.u64()))
            default:
                r.failed = true
            }
        }
        let masked = r.strings()

        if r.u8() != 0 { r.failed = true }  // network: .none is the only mode
        let network = NetworkPolicy.none

        let pass = r.strings()
        var set: [String: String] = [:]
        var previous: String?
        for _ in 0..<r.count() where !r.failed {
            let key = r.string()
            let value = r.string()
            if let previous, !(previous < key) { r.failed = true }
            previous = key
            set[key] = value
        }

        var limits = ResourceLimits(
            memoryBytes: r.optionalU64(), processes: r.optionalU64(), cpuSeconds: r.optionalU64(),
            openFiles: r.optionalU64(), fileSizeBytes: r.optionalU64(), wallClockSeconds: r.optionalU64())
        switch r.u8() {
        case 0: limits.memoryScope = .sandbox
        case 1: limits.memoryScope = .perProcess
        default: r.failed = true
        }
        let composedFrom = r.strings()
        guard !r.failed else { return nil }
        return Policy(
            name: name, sourcePath: sourcePath, description: description,
            seccomp: SeccompPolicy(
                defaultAction: defaultAction, rules: rules, allowExecAfterStart: allowExec,
                memoryDenyWriteExecute: memoryDenyWriteExecute),
            filesystem: FilesystemPolicy(mounts: mounts, masked: masked), network: network,
            environment: EnvironmentPolicy(pass: pass, set: set), limits: limits, composedFrom: composedFrom)
    }

    static func encode(_ action: SyscallAction, into w: inout ByteWriter) {
        switch action {
        case .allow: w.u8(0)
        case .errno(let value):
            w.u8(1)
            w.u32(UInt32(bitPattern: value))
        case .killProcess: w.u8(2)
        case .log: w.u8(3)
        }
    }

    static func decodeAction(from r: inout ByteReader) -> SyscallAction {
        switch r.u8() {
        case 0: return .allow
        case 1: return .errno(Int32(bitPattern: r.u32()))
        case 2: return .killProcess
        case 3: return .log
        default:
            r.failed = true
            return .killProcess
        }
    }

    static func encode(_ resolution: PolicyResolution, into w: inout ByteWriter) {
        w.strings(resolution.searchDirectories)
        w.count(resolution.files.count)
        for file in resolution.files {
            w.string(file.path)
            w.bytes(file.bytes)
        }
        w.count(resolution.nameLookups.count)
        for lookup in resolution.nameLookups {
            w.string(lookup.name)
            w.optionalString(lookup.excluding)
            w.string(lookup.file)
        }
        w.count(resolution.canonicalPaths.count)
        for entry in resolution.canonicalPaths {
            w.string(entry.path)
            w.string(entry.canonical)
        }
    }

    static func decodeResolution(from r: inout ByteReader) -> PolicyResolution? {
        var resolution = PolicyResolution()
        resolution.searchDirectories = r.strings()
        for _ in 0..<r.count() where !r.failed {
            let path = r.string()
            resolution.files.append(PolicyResolution.File(path: path, bytes: r.bytes()))
        }
        for _ in 0..<r.count() where !r.failed {
            let name = r.string()
            let excluding = r.optionalString()
            resolution.nameLookups.append(PolicyResolution.NameLookup(name: name, excluding: excluding, file: r.string()))
        }
        for _ in 0..<r.count() where !r.failed {
            let path = r.string()
            resolution.canonicalPaths.append(PolicyResolution.CanonicalPath(path: path, canonical: r.string()))
        }
        return r.failed ? nil : resolution
    }

    /// A 64-bit checksum against accidental damage (a torn or garbled file), not against an
    /// attacker: the cache directory is the user's own. Each 8-byte word goes through a bijection
    /// of the state, so any change confined to one word always changes the result.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var h: UInt64 = 0x9e37_79b9_7f4a_7c15 ^ UInt64(bytes.count)
        var i = 0
        while i + 8 <= bytes.count {
            h = (h ^ bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* 0xff51_afd7_ed55_8ccd
            h ^= h >> 32
            i += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while i < bytes.count {
            tail |= UInt64(bytes[i]) << shift
            shift += 8
            i += 1
        }
        h = (h ^ tail) &* 0xc4ce_b9fe_1a85_ec53
        h ^= h >> 29
        return h
    }
}
