/// Path text operations (no file-system access).
package enum FilePaths {
    /// The last component: "standard.yaml" for "/etc/x/standard.yaml".
    package static func lastComponent(_ path: String) -> String {
        let trimmed = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
        guard let slash = trimmed.lastIndex(of: "/"), trimmed != "/" else { return trimmed }
        return String(trimmed[trimmed.index(after: slash)...])
    }

    /// The directory part: "/etc/x" for "/etc/x/a.yaml", "/" for "/a", "" for "a.yaml".
    package static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    package static func join(_ directory: String, _ name: String) -> String {
        directory.isEmpty ? name : directory.hasSuffix("/") ? directory + name : directory + "/" + name
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

    /// The components of `path`, split at each slash byte, empty ones left out. Splitting into
    /// characters would miss a slash that a combining mark after it joins into one character.
    package static func components(_ path: String) -> [Substring] {
        path.utf8.split(separator: UInt8(ascii: "/")).map { Substring($0) }
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
