import Testing
@testable import SandboxPolicy
import TestSupport

/// The shipped levels' argument rules for socket families, personality and prlimit64 (issue 9,
/// item 4), read through the BPF interpreter.
@Suite("Shipped levels: socket families, personality, prlimit64", .offThePool)
struct ShippedArgumentRuleTests {
    static let eperm = SeccompReturn.errno | 1
    static let eafnosupport = SeccompReturn.errno | 97
    static let allow = SeccompReturn.allow

    static func filter(_ level: String) throws -> CompiledSeccompFilter {
        try PolicyLoader.load(file: packageRoot.appendingPathComponent("Policies/\(level).yaml").path)
            .compileSeccompFilter(mode: .supervised)
    }

    static func eval(_ filter: CompiledSeccompFilter, _ name: String, _ args: [UInt64]) -> UInt32 {
        filter.evaluate(syscall: Syscalls.number(of: name)!, arguments: args)
    }

    @Test("standard: only unix, inet, inet6 and routing netlink sockets; every other family fails with EAFNOSUPPORT")
    func standardSocketFamilies() throws {
        let f = try Self.filter("standard")
        for family: UInt64 in [1, 2, 10, 0xffff_ffff_0000_0001] {
            #expect(Self.eval(f, "socket", [family, 1, 0]) == Self.allow, "family \(family)")
        }
        #expect(Self.eval(f, "socket", [16, 3, 0]) == Self.allow)  // AF_NETLINK, NETLINK_ROUTE
        for (family, proto): (UInt64, UInt64) in [(40, 0), (16, 15), (16, 4), (17, 0), (38, 0), (31, 0), (0, 0), (0x1_0000_0028, 0)] {
            #expect(Self.eval(f, "socket", [family, 1, proto]) == Self.eafnosupport, "family \(family) protocol \(proto)")
        }
        #expect(Self.eval(f, "socketpair", [1, 1, 0]) == Self.allow)
        #expect(Self.eval(f, "socketpair", [2, 1, 0]) == Self.eafnosupport)
        #expect(Self.eval(f, "socketpair", [40, 1, 0]) == Self.eafnosupport)
    }

    @Test("personality: only PER_LINUX and the query; prlimit64: only the caller itself", arguments: ["standard", "restricted"])
    func personalityAndPrlimit(level: String) throws {
        let f = try Self.filter(level)
        #expect(Self.eval(f, "personality", [0]) == Self.allow)
        #expect(Self.eval(f, "personality", [0xffff_ffff]) == Self.allow)
        for persona: UInt64 in [0x040_0000, 0x004_0000, 0x010_0000, 0x020_0000, 0x8, 0xffff_fffe] {  // READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, …
            #expect(Self.eval(f, "personality", [persona]) == Self.eperm, "persona 0x\(String(persona, radix: 16))")
        }
        #expect(Self.eval(f, "prlimit64", [0, 7, 0x1000, 0]) == Self.allow)
        #expect(Self.eval(f, "prlimit64", [1, 7, 0x1000, 0]) == Self.eperm)
        #expect(Self.eval(f, "prlimit64", [1, 7, 0, 0x1000]) == Self.eperm)
    }

    @Test("hardened: prlimit64 only on the caller itself")
    func hardenedPrlimit() throws {
        let f = try Self.filter("hardened")
        #expect(Self.eval(f, "prlimit64", [0, 7, 0, 0x1000]) == Self.allow)
        #expect(Self.eval(f, "prlimit64", [1, 7, 0x1000, 0]) == Self.eperm)
    }
}
