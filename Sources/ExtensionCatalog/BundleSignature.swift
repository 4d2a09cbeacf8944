import SandboxSystem

/// A bundle's signature file, `extension.signature` (docs/signatures.md): the identifier and
/// version it was signed for, the signer's public key, every file, directory and symbolic link of
/// the bundle (path, mode, SHA-256) and the Ed25519 signature of all the lines before it.
///
/// ```
/// extsandbox-signature 1
/// identifier org.example.upcase
/// version 1.2
/// signer ed25519:<64 hex>
/// dir 0755 bin
/// file 0755 sha256:<64 hex> bin/upcase
/// file 0644 sha256:<64 hex> extension.yaml
/// link sha256:<64 hex> share/latest
/// signature <128 hex>
/// ```
///
/// The text is canonical: LF line ends, no blank or comment lines, entries sorted by the bytes of
/// their paths, so one listing has exactly one signed text.
public struct BundleSignature: Sendable, Hashable {
    /// One thing in the bundle.
    public struct Entry: Sendable, Hashable {
        public enum Kind: Sendable, Hashable {
            /// A regular file: its permission bits (`mode & 07777`) and the SHA-256 of its bytes.
            case file(mode: UInt32, digest: ContentDigest)
            /// A directory and its permission bits.
            case directory(mode: UInt32)
            /// A symbolic link and the SHA-256 of its target's text.
            case link(target: ContentDigest)
        }

        /// The path relative to the bundle (`bin/upcase`).
        public var path: String
        public var kind: Kind

        public init(path: String, kind: Kind) {
            self.path = path
            self.kind = kind
        }

        /// The entry's line, without its line feed.
        var line: String {
            switch kind {
            case .file(let mode, let digest): return "file \(Self.octal(mode)) \(digest) \(path)"
            case .directory(let mode): return "dir \(Self.octal(mode)) \(path)"
            case .link(let target): return "link \(target) \(path)"
            }
        }

        static func octal(_ mode: UInt32) -> String { String(mode, radix: 8).leftPadded(to: 4) }

        /// How the entry reads to a person (in reasons: "a file", "a directory").
        var kindName: String {
            switch kind {
            case .file: return "a file"
            case .directory: return "a directory"
            case .link: return "a symbolic link"
            }
        }
    }

    /// The signature file's name inside a bundle (it is the one file the listing leaves out).
    public static let fileName = "extension.signature"
    static let header = "extsandbox-signature 1"
    /// Signature files larger than this are refused.
    public static let maximumSize = 16 << 20
    /// Bundles with more entries than this cannot be signed.
    public static let maximumEntries = 100_000

    public var identifier: String
    public var version: String
    public var signer: SignerKey
    /// Sorted by the bytes of their paths.
    public var entries: [Entry]
    /// The Ed25519 signature (64 bytes) of ``signedText``.
    public var signature: [UInt8]

    public init(identifier: String, version: String, signer: SignerKey, entries: [Entry], signature: [UInt8] = []) {
        self.identifier = identifier
        self.version = version
        self.signer = signer
        self.entries = Self.sortedByPath(entries)
        self.signature = signature
    }

    /// `entries` in the file's order: by the bytes of their paths.
    static func sortedByPath(_ entries: [Entry]) -> [Entry] {
        entries.sorted { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
    }

    /// The lines the signature covers: everything before the `signature` line, each ended by LF.
    public var signedText: String {
        var lines = [Self.header, "identifier \(identifier)", "version \(version)", "signer \(signer)"]
        lines += entries.map(\.line)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The whole file.
    public func rendered() -> String { signedText + "signature \(Hex.encode(signature))\n" }

    /// Whether the signature is the signer's over ``signedText``.
    public var isValid: Bool { signer.verifies(signature, of: Array(signedText.utf8)) }

    /// The entry for `path`, if listed.
    public func entry(_ path: String) -> Entry? {
        let key = Array(path.utf8)
        var low = 0, high = entries.count
        while low < high {
            let middle = (low + high) / 2
            let probe = Array(entries[middle].path.utf8)
            if probe == key { return entries[middle] }
            if probe.lexicographicallyPrecedes(key) { low = middle + 1 } else { high = middle }
        }
        return nil
    }

    /// Parses a signature file. Anything that is not exactly the documented form (a field out of
    /// order, an unsorted or repeated path, a path with `.`, `..`, an empty component or a control
    /// character, an entry whose directory is not listed, a missing manifest entry, text after the
    /// signature) is an error naming the line. It does not check the signature (``isValid``).
    public static func parse(_ bytes: [UInt8], path: String) throws(CatalogProblem) -> BundleSignature {
        guard bytes.count <= maximumSize else { throw CatalogProblem(.broken, file: path, "larger than \(maximumSize >> 20) MiB") }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CatalogProblem(.broken, file: path, line: utf8ErrorLine(bytes), "not UTF-8")
        }
        guard text.utf8.last == 0x0a else { throw CatalogProblem(.broken, file: path, "the last line does not end with a line feed (or the file is empty)") }
        let lines = text.utf8.dropLast().split(separator: 0x0a, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        func field(_ index: Int, _ name: String) throws(CatalogProblem) -> String {
            guard index < lines.count, lines[index].hasPrefix(name + " ") else {
                throw CatalogProblem(.broken, file: path, line: index + 1, "expected '\(name) …' on this line")
            }
            return String(lines[index].dropFirst(name.count + 1))
        }
        guard lines.first == header else { throw CatalogProblem(.broken, file: path, line: 1, "expected '\(header)' as the first line") }
        let identifier = try field(1, "identifier")
        try ManifestFields.checkReverseDNS(identifier, what: "identifier", path: path, line: 2)
        let version = try field(2, "version")
        guard ExtensionVersion.isSignable(version) else {
            throw CatalogProblem(.broken, file: path, line: 3, "the version must be letters, digits and . + - _ ~ (1 to 64 of them)")
        }
        guard let signer = SignerKey(try field(3, "signer")) else {
            throw CatalogProblem(.broken, file: path, line: 4, "expected 'signer ed25519:' and 64 lowercase hex digits")
        }
        guard lines.count >= 6 else { throw CatalogProblem(.broken, file: path, line: lines.count + 1, "expected the bundle's entries and a 'signature' line") }
        var entries: [Entry] = []
        // By bytes: as strings, a directory listed as "é" would also be the parent of "e\u{301}/x".
        var directories: Set<[UInt8]> = []
        var previous: [UInt8]?
        for index in 4..<(lines.count - 1) {
            let line = index + 1
            let entry = try parseEntry(lines[index], path: path, line: line)
            let key = Array(entry.path.utf8)
            if let previous, !previous.lexicographicallyPrecedes(key) {
                throw CatalogProblem(.broken, file: path, line: line, previous == key ? "\(entry.path) is listed twice" : "the entries are not sorted by path (bytewise)")
            }
            previous = key
            let parent = FilePaths.directory(of: entry.path)
            if FilePaths.containsSlash(entry.path), !directories.contains(Array(parent.utf8)) {
                throw CatalogProblem(.broken, file: path, line: line, "\(entry.path) is listed, but its directory \(parent) is not")
            }
            if case .directory = entry.kind { directories.insert(key) }
            if FilePaths.isSame(entry.path, Self.fileName) { throw CatalogProblem(.broken, file: path, line: line, "the signature file cannot list itself") }
            guard entries.count < maximumEntries else { throw CatalogProblem(.broken, file: path, line: line, "more than \(maximumEntries) entries") }
            entries.append(entry)
        }
        let last = lines.count - 1
        let hex = try field(last, "signature")
        guard let signature = Hex.decode(hex), signature.count == 64 else {
            throw CatalogProblem(.broken, file: path, line: last + 1, "expected 'signature' and 128 lowercase hex digits")
        }
        var result = BundleSignature(identifier: identifier, version: version, signer: signer, entries: [], signature: signature)
        result.entries = entries
        guard case .file = result.entry(ExtensionManifest.fileName)?.kind else {
            throw CatalogProblem(.broken, file: path, "the manifest (\(ExtensionManifest.fileName)) is not listed as a file")
        }
        return result
    }

    private static func parseEntry(_ text: String, path: String, line: Int) throws(CatalogProblem) -> Entry {
        // The path is the rest of the line after the fields (it may hold spaces). Split at space
        // bytes, as `Entry.line` joins them: as characters, a space followed by a combining
        // mark (before a name that starts with one, "\u{301}x") is no space.
        let space = UInt8(ascii: " ")
        let bytes = Substring(text).utf8
        let kind = bytes.prefix { $0 != space }
        func isKind(_ name: String) -> Bool { kind.elementsEqual(name.utf8) }
        let words = bytes.split(separator: space, maxSplits: isKind("file") ? 3 : 2, omittingEmptySubsequences: false).map { Substring($0) }
        let entry: Entry
        if isKind("file"), words.count == 4 {
            guard let mode = mode(words[1]), let digest = ContentDigest(words[2]) else {
                throw CatalogProblem(.broken, file: path, line: line, "expected 'file MODE sha256:HEX PATH' (MODE: 4 octal digits)")
            }
            entry = Entry(path: String(words[3]), kind: .file(mode: mode, digest: digest))
        } else if isKind("dir"), words.count == 3 {
            guard let mode = mode(words[1]) else { throw CatalogProblem(.broken, file: path, line: line, "expected 'dir MODE PATH' (MODE: 4 octal digits)") }
            entry = Entry(path: String(words[2]), kind: .directory(mode: mode))
        } else if isKind("link"), words.count == 3 {
            guard let target = ContentDigest(words[1]) else { throw CatalogProblem(.broken, file: path, line: line, "expected 'link sha256:HEX PATH'") }
            entry = Entry(path: String(words[2]), kind: .link(target: target))
        } else {
            throw CatalogProblem(.broken, file: path, line: line, "expected a 'file', 'dir' or 'link' entry, or the 'signature' line")
        }
        if let problem = BundleSignature.problem(withPath: entry.path) {
            throw CatalogProblem(.broken, file: path, line: line, "path \(entry.path): \(problem)")
        }
        return entry
    }

    /// Four octal digits, at most 07777.
    private static func mode(_ text: Substring) -> UInt32? {
        guard text.utf8.count == 4, text.utf8.allSatisfy({ (0x30...0x37).contains($0) }) else { return nil }
        return UInt32(text, radix: 8)
    }

    /// Why `path` cannot be an entry's path, or `nil`: relative, components neither empty nor
    /// `.` nor `..`, no control character (C0, DEL, C1). Split at slash bytes, as the kernel
    /// splits it: as characters, a slash with a combining mark after it (or a prepended mark
    /// before it) is no slash, and `x\u{600}/../y` would have no `..` component.
    static func problem(withPath path: String) -> String? {
        if path.isEmpty { return "empty" }
        if path.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) }) { return "contains a control character" }
        for component in path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            if component.isEmpty { return "has an empty component (a leading, trailing or doubled '/')" }
            if component.elementsEqual(".".utf8) || component.elementsEqual("..".utf8) { return "has a '.' or '..' component" }
        }
        return nil
    }

    /// The line of the first byte that is not UTF-8.
    private static func utf8ErrorLine(_ bytes: [UInt8]) -> Int {
        var line = 1
        var start = 0
        for (index, byte) in bytes.enumerated() where byte == 0x0a {
            if String(validating: bytes[start..<index], as: UTF8.self) == nil { return line }
            line += 1
            start = index + 1
        }
        return line
    }
}
