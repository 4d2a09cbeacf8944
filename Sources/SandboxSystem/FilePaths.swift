/// Path text operations (no file-system access), on the path's bytes, as the kernel reads it:
/// as characters, a slash followed by a combining mark (or after a prepended mark) would be no
/// slash, and two spellings of one character (a precomposed "é", "e" with a combining accent;
/// the Kelvin sign and "K") would be one name.
package enum FilePaths {
    private static let slash = UInt8(ascii: "/")

    /// The last component: "standard.yaml" for "/etc/x/standard.yaml".
    package static func lastComponent(_ path: String) -> String {
        var bytes = Substring(path).utf8
        if bytes.count > 1 && bytes.last == slash { bytes = bytes.dropLast() }
        guard bytes.count > 1 || bytes.first != slash, let cut = bytes.lastIndex(of: slash) else { return String(Substring(bytes)) }
        return String(Substring(bytes[bytes.index(after: cut)...]))
    }

    /// The directory part: "/etc/x" for "/etc/x/a.yaml", "/" for "/a", "" for "a.yaml".
    package static func directory(of path: String) -> String {
        let bytes = Substring(path).utf8
        guard let cut = bytes.lastIndex(of: slash) else { return "" }
        return cut == bytes.startIndex ? "/" : String(Substring(bytes[..<cut]))
    }

    package static func join(_ directory: String, _ name: String) -> String {
        directory.isEmpty ? name : directory.utf8.last == slash ? directory + name : directory + "/" + name
    }

    /// Whether `path` starts at the root (its first byte is a slash).
    package static func isAbsolute(_ path: String) -> Bool { path.utf8.first == slash }

    /// Whether `text` has a slash byte anywhere (so names a path, not a single file name).
    package static func containsSlash(_ text: String) -> Bool { text.utf8.contains(slash) }

    /// Whether `path` ends with the bytes of `suffix` (".yaml", ".appex").
    package static func hasSuffix(_ path: String, _ suffix: String) -> Bool {
        let (p, s) = (path.utf8, suffix.utf8)
        return p.count >= s.count && p.suffix(s.count).elementsEqual(s)
    }

    /// `path` without the bytes of `suffix` at its end (`path` itself when it does not end so).
    package static func droppingSuffix(_ path: String, _ suffix: String) -> String {
        hasSuffix(path, suffix) ? String(Substring(Substring(path).utf8.dropLast(suffix.utf8.count))) : path
    }

    /// Whether `path` is `directory` followed by a slash and more: "/usr/lib" is below "/usr",
    /// "/usrx" and "/usr" are not ("/usr/" is: callers pass paths without a trailing slash).
    /// Bytes are compared, as the kernel compares them. Below "/" lies every other absolute path.
    package static func isBelow(_ path: String, _ directory: String) -> Bool {
        let (p, d) = (path.utf8, directory.utf8)
        guard p.count > d.count, p.starts(with: d) else { return false }
        return d.last == UInt8(ascii: "/") || p[p.index(p.startIndex, offsetBy: d.count)] == UInt8(ascii: "/")
    }

    /// Whether two paths are the same bytes. `==` on strings would also take two spellings of
    /// one character (a precomposed "é" and "e" with a combining accent) as equal; the kernel
    /// takes them as two names.
    package static func isSame(_ a: String, _ b: String) -> Bool {
        a.utf8.elementsEqual(b.utf8)
    }

    /// Whether `a` sorts before `b` by their bytes. `<` on strings sorts two spellings of one
    /// character as equal, so which of two such names comes first would be the directory's order.
    package static func precedes(_ a: String, _ b: String) -> Bool {
        a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    /// Whether two lists of paths are the same paths in the same order, by bytes.
    package static func areSame(_ a: [String], _ b: [String]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { isSame($0, $1) }
    }

    /// The components of `path`, split at each slash byte, empty ones left out. Splitting into
    /// characters would miss a slash that a combining mark after it joins into one character.
    package static func components(_ path: String) -> [Substring] {
        path.utf8.split(separator: UInt8(ascii: "/")).map { Substring($0) }
    }

    /// The entries of a colon-separated list of paths (`PATH`, `EXTSANDBOX_EXTENSION_DIRS`), empty
    /// ones left out, cut at colon bytes: a colon that a combining mark follows is one character
    /// to Swift, but a separator all the same.
    package static func searchList(_ value: String) -> [String] {
        value.utf8.split(separator: UInt8(ascii: ":")).map { String(Substring($0)) }
    }

    /// How many components `path` has, empty ones not counted: 2 for "/usr/lib" and "usr//lib/".
    package static func componentCount(_ path: String) -> Int {
        var count = 0
        var previous = UInt8(ascii: "/")
        for byte in path.utf8 {
            if byte != UInt8(ascii: "/") && previous == UInt8(ascii: "/") { count += 1 }
            previous = byte
        }
        return count
    }

    /// Whether `path` is absolute and normalized: no empty component ("//", a trailing "/"), no
    /// "." or "..", and not "/" itself. Such a path needs no rewriting.
    package static func isNormalizedAbsolute(_ path: String) -> Bool {
        let slash = UInt8(ascii: "/"), dot = UInt8(ascii: ".")
        var bytes = path.utf8.makeIterator()
        guard bytes.next() == slash else { return false }
        // Each component's length and whether it is only dots so far.
        var length = 0, onlyDots = true
        while let byte = bytes.next() {
            if byte == slash {
                if length == 0 || (onlyDots && length <= 2) { return false }
                length = 0
                onlyDots = true
            } else {
                length += 1
                onlyDots = onlyDots && byte == dot
            }
        }
        return length > 0 && !(onlyDots && length <= 2)
    }
}
