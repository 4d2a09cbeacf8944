import CMechanismSupport
import Glibc
import Testing

/// capabilities.c: the payload drops every capability and locks the securebits; the clone child
/// keeps every one across its exec of the init. Read from /proc/self/status of a forked child
/// of the test process, which runs as root with every capability.
@Suite("Capabilities")
struct CapabilityTests {
    /// The kernel's last capability, and the mask of all of them.
    static var lastCap: Int32 {
        let text = (try? String(contentsOfFile: "/proc/sys/kernel/cap_last_cap", encoding: .utf8)) ?? ""
        return Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 40
    }
    static var all: Int64 { Int64((UInt64(1) << (UInt64(lastCap) + 1)) - 1) }

    /// SECBIT_NOROOT, _NO_SETUID_FIXUP and _NO_CAP_AMBIENT_RAISE, each locked, and KEEP_CAPS locked off.
    static let lockedSecureBits: Int64 = 0b1110_1111

    @Test("the payload drops everything: every set empty, securebits locked, no_new_privs")
    func dropped() throws {
        let out = try outcome { xsbt_capabilities(XSBT_DROP_CAPABILITIES, Self.lastCap, $0) }
        try #require(out.ranThrough, "\(out.failure)")
        let numbers = out.numbers
        #expect(Array(numbers[Int(XSBT_CAP_INH)...Int(XSBT_CAP_AMB)]) == [0, 0, 0, 0, 0], "CapInh, CapPrm, CapEff, CapBnd, CapAmb")
        #expect(numbers[Int(XSBT_NO_NEW_PRIVS)] == 1)
        #expect(numbers[Int(XSBT_SECUREBITS)] == Self.lockedSecureBits)
    }

    @Test("a cap_last_cap below the kernel's still drops the kernel's last one")
    func droppedPastCapLastCap() throws {
        let out = try outcome { xsbt_capabilities(XSBT_DROP_CAPABILITIES, 30, $0) }
        try #require(out.ranThrough, "\(out.failure)")
        #expect(out.numbers[Int(XSBT_CAP_BND)] == 0)
    }

    @Test("the clone child keeps every capability across the exec: inheritable and ambient")
    func keptAcrossExec() throws {
        let out = try outcome { xsbt_capabilities(XSBT_KEEP_CAPABILITIES, Self.lastCap, $0) }
        try #require(out.ranThrough && out.result == 0, "\(out.failure)")
        let numbers = out.numbers
        #expect(numbers[Int(XSBT_CAP_PRM)] == Self.all)
        #expect(numbers[Int(XSBT_CAP_INH)] == Self.all)
        #expect(numbers[Int(XSBT_CAP_AMB)] == Self.all)
    }

    @Test("a capability beyond the kernel's fails the keep, naming the step")
    func keepBeyondTheKernel() throws {
        let out = try outcome { xsbt_capabilities(XSBT_KEEP_CAPABILITIES, Self.lastCap + 1, $0) }
        #expect(out.ranThrough && out.result == -1 && out.detail == "ambient capabilities", "\(out.failure)")
    }
}
