import Glibc

/// An errno value with its message.
package struct Errno: Error, Equatable, CustomStringConvertible {
    package var code: Int32
    package init(_ code: Int32) { self.code = code }
    package var description: String { String(cString: strerror(code)) }
}
