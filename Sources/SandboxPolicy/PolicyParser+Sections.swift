import CSeccomp
import SandboxSystem
import YAMLSupport

// The filesystem, environment and limits sections of a policy file (PolicyParser.swift has
// the document, seccomp and names).
extension PolicyParser {
    // MARK: filesystem

    /// An absolute, normalized path; reports a problem and returns nil otherwise. Split and
    /// compared as bytes, as the kernel reads it: as characters, a slash followed by a combining
    /// mark would be no separator, and a ".." behind it would go unseen.
    func path(_ text: String, loc: Loc, what: String) -> String? {
        guard text.utf8.first == UInt8(ascii: "/") else {
            diag.error(loc, "\(what) must be an absolute path, found \"\(text)\"")
            return nil
        }
        let parts = FilePaths.components(text)
        if parts.contains(where: { $0.utf8.elementsEqual("..".utf8) || $0.utf8.elementsEqual(".".utf8) }) {
            diag.error(loc, "\(what) must not contain \".\" or \"..\" components: \"\(text)\"")
            return nil
        }
        if text.contains("\0") || text.contains("\n") {
            diag.error(loc, "\(what) contains a control character")
            return nil
        }
        return "/" + parts.joined(separator: "/")
    }

    func parseFilesystem(_ node: YAMLNode, masked: inout [String]) -> [PolicyLayer.Mount] {
        if node.isNull { return [] }
        guard let entries = reader.mapping(node, what: "filesystem", keys: Self.filesystemKeys) else { return [] }
        var mounts: [PolicyLayer.Mount] = []
        // By bytes: two spellings of one character are two destinations.
        var destinations: [[UInt8]: Loc] = [:]
        func add(_ entry: MountEntry, destination: String, loc: Loc) {
            if destination == "/" {
                diag.error(loc, "cannot mount over \"/\": the sandbox's root is an empty tmpfs that the entries fill")
                return
            }
            if let earlier = destinations[Array(destination.utf8)] {
                diag.error(loc, "\(destination) is mounted twice (also at line \(earlier.line))")
                return
            }
            destinations[Array(destination.utf8)] = loc
            mounts.append(.init(entry: entry, destination: destination, loc: here(loc)))
        }
        for (key, _, value) in entries {
            if key == "mask" {
                for (text, itemNode) in reader.stringList(value, what: "mask") ?? [] {
                    guard let p = path(text, loc: Loc(itemNode), what: "a masked path") else { continue }
                    if p == "/" {
                        diag.error(itemNode, "cannot mask \"/\": list the paths inside that should be hidden")
                        continue
                    }
                    // By bytes: two spellings of one character are two host names.
                    if !masked.contains(where: { FilePaths.isSame($0, p) }) { masked.append(p) }
                }
                continue
            }
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
        return mounts
    }

    // MARK: environment and limits

    func parseEnvironment(_ node: YAMLNode, into layer: inout PolicyLayer) {
        if node.isNull { return }
        guard let entries = reader.mapping(node, what: "environment", keys: Self.environmentKeys) else { return }
        for (key, _, value) in entries {
            if key == "pass" {
                for (name, itemNode) in reader.stringList(value, what: "pass") ?? [] {
                    if Values.isVariableName(name) {
                        if !layer.pass.contains(name) { layer.pass.append(name) }
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
                    if let v = reader.string(valueNode, what: "the value of \(name)") { layer.set.append((name, v)) }
                }
            }
        }
    }

    func parseLimits(_ node: YAMLNode) -> [(key: String, value: UInt64?)] {
        if node.isNull { return [] }
        guard let entries = reader.mapping(node, what: "limits", keys: Self.limitKeys) else { return [] }
        var limits: [(key: String, value: UInt64?)] = []
        for (key, _, value) in entries {
            guard let text = reader.string(value, what: key) else { continue }
            if key == "memory-scope" {
                guard let index = MemoryScope.allCases.firstIndex(where: { $0.rawValue == text }) else {
                    diag.error(value, "bad value \"\(text)\" for memory-scope; expected sandbox (the whole sandbox, through a cgroup) or per-process (each process on its own)")
                    continue
                }
                limits.append((key, UInt64(index)))
                continue
            }
            if Values.isUnlimited(text) {
                limits.append((key, nil))
                continue
            }
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
            limits.append((key, parsed))
        }
        return limits
    }
}
