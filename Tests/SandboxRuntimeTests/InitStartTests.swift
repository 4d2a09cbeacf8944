import Foundation
import Glibc
@testable import SandboxRuntime
import TestSupport
import Testing

/// xsb-init starts without glibc (Sources/xsb-init/runtime): glibc's static start-up probes the
/// CPU (cpuid, a trip through the hypervisor each on a VM) on every exec of the init. What glibc
/// did for the init, its own runtime does.
@Suite("The init's start without glibc", .offThePool)
struct InitStartTests {
    static var initPath: String { TestPaths.product("xsb-init") }

    /// The `p_type` of each program header of the 64-bit little-endian ELF `image`.
    static func programHeaderTypes(_ image: [UInt8]) throws -> [UInt32] {
        func integer<T: FixedWidthInteger>(_ offset: Int, _: T.Type) -> T {
            image[offset..<offset + MemoryLayout<T>.size].reversed().reduce(0) { $0 << 8 | T($1) }
        }
        try #require(image.count >= 64 && image[0..<4] == [0x7f, 0x45, 0x4c, 0x46] && image[4] == 2 && image[5] == 1)
        let offset = Int(integer(32, UInt64.self)), size = Int(integer(54, UInt16.self)), count = Int(integer(56, UInt16.self))
        try #require(size >= 4 && offset + size * count <= image.count)
        return (0..<count).map { integer(offset + $0 * size, UInt32.self) }
    }

    @Test("xsb-init is a static executable (or static PIE) with no interpreter, no TLS and nothing of glibc's start-up")
    func noGlibcStartUp() throws {
        let image = try [UInt8](Data(contentsOf: URL(fileURLWithPath: Self.initPath)))
        let types = try Self.programHeaderTypes(image)
        // ET_EXEC, or ET_DYN: a static PIE (scripts/build-cli), which the init relocates itself.
        #expect((image[16] == 2 || image[16] == 3) && image[17] == 0, "not an executable")
        #expect(!types.contains(3), "it asks for a dynamic loader (PT_INTERP)")
        #expect(!types.contains(7), "it has thread-local storage (PT_TLS), which nothing of its own sets up")
        // glibc's static start-up reads its tunables (the string stays when symbols are stripped).
        let data = Data(image)
        for glibc in ["GLIBC_TUNABLES", "__libc_start_main", "init_cpu_features"] {
            #expect(data.range(of: Data(glibc.utf8)) == nil, "xsb-init holds \(glibc)")
        }
    }

    /// `key`'s hexadecimal mask in /proc/PID/status.
    static func mask(_ pid: pid_t, _ key: String) -> UInt64? {
        SandboxInitTests.status(pid, key).flatMap { UInt64($0, radix: 16) }
    }

    @Test("a running sandbox's init blocks every signal, ignores none and handles SIGUSR1 only (its receiver's wake-up)")
    func signalState() async throws {
        // Retried like SandboxInitTests' inspection: on a loaded machine the program has ended early.
        for _ in 0..<3 {
            let process = try await Supervisor.shared.launch(try Fixtures.probeConfiguration(["sleep", "600"]))
            defer { process.kill() }
            guard let blocked = Self.mask(process.pid, "SigBlk"), let ignored = Self.mask(process.pid, "SigIgn"),
                  let caught = Self.mask(process.pid, "SigCgt"), process.isRunning
            else { continue }
            // All 64 but the two the kernel never blocks; glibc's own 32 and 33 too (glibc's
            // sigprocmask kept those two unblocked).
            let unblockable: UInt64 = 1 << (UInt64(SIGKILL) - 1) | 1 << (UInt64(SIGSTOP) - 1)
            #expect(blocked == UInt64.max & ~unblockable, "\(String(blocked, radix: 16))")
            #expect(ignored == 0, "\(String(ignored, radix: 16))")
            #expect(caught == 1 << (UInt64(SIGUSR1) - 1), "\(String(caught, radix: 16))")
            return
        }
        Issue.record("the sandbox's program ended before its init could be inspected, 3 times")
    }
}
