import CMechanismSupport
import Glibc
import Testing

/// A NUL-terminated C character array (imported as a tuple) as a String.
func cText<T>(_ tuple: T) -> String {
    withUnsafeBytes(of: tuple) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
}

/// A NUL-terminated C character buffer as a String.
func cText(_ chars: [CChar]) -> String {
    String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

extension xsbt_outcome {
    /// The detail of the step the mechanism reported failing.
    var detail: String { cText(failed_detail) }
    /// The case's own text.
    var report: String { cText(text) }
    /// The case's own numbers.
    var numbers: [Int64] { withUnsafeBytes(of: values) { Array($0.bindMemory(to: Int64.self)) } }
    /// The snapshot of the child's fds 0 ..< XSBT_FD_SLOTS.
    var slots: [xsbt_fd_slot] { withUnsafeBytes(of: fds) { Array($0.bindMemory(to: xsbt_fd_slot.self)) } }
    /// The child ran to its report and exited 0.
    var ranThrough: Bool { returned == 1 && wait_status == 0 }
    /// The mechanism reported `step` failing and the child exited 127, as the payload and the init do.
    func failed(at step: xsb_step) -> Bool {
        returned == 0 && wait_status == 127 << 8 && failed_step == Int32(step.rawValue)
    }
    /// Everything about a failure, for messages.
    var failure: String {
        "returned \(returned), status \(wait_status), step \(String(cString: xsb_step_name(failed_step))), errno \(failed_errno), detail \(detail)"
    }
}

/// An outcome in a failed expectation: what matters, not its 6 KiB of raw arrays.
extension xsbt_outcome: @retroactive CustomTestStringConvertible {
    public var testDescription: String { "outcome(result \(result), \(failure))" }
}

/// Runs one case of CMechanismSupport, which forks and waits for its child.
func outcome(_ run: (UnsafeMutablePointer<xsbt_outcome>) -> Int32) throws -> xsbt_outcome {
    var out = xsbt_outcome()
    let rc = run(&out)
    try #require(rc == 0, "the case's child could not be started: errno \(-rc)")
    return out
}
