#if os(Linux)
import CSeccomp
import Foundation
import Glibc
import Testing
@testable import SandboxPolicy
import TestSupport

/// Loads Policies/standard.yaml compiled in `.inKernel` mode into the calling thread. Only for
/// exit-test bodies: they run in a child process of their own.
private func installStandardFilter() {
    guard let policy = try? PolicyLoader.load(file: standardPolicyPath),
        let filter = try? policy.compileSeccompFilter(mode: .inKernel)
    else { exit(90) }
    let rc = filter.program.withUnsafeBytes { xsb_install_seccomp_program($0.baseAddress, $0.count) }
    if rc != 0 { exit(91) }
}

/// A raw system call; returns the result, or -errno.
private func rawSyscall(_ name: String, _ a: [UInt] = []) -> Int {
    guard let nr = Syscalls.number(of: name) else { exit(92) }
    return rawSyscall(Int(nr), a)
}

private func rawSyscall(_ nr: Int, _ a: [UInt]) -> Int {
    let args = a + [UInt](repeating: 0, count: 6 - a.count)
    let r = xsb_raw_syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
    return r < 0 ? -Int(errno) : r
}

@Suite("Filters in a real process")
struct FilterExitTests {
    @Test(.oneExitTestAtATime) func killedSyscallKillsWithSIGSYS() async {
        await #expect(processExitsWith: .signal(SIGSYS)) {
            let ptrace = Syscalls.number(of: "ptrace")!
            installStandardFilter()
            _ = rawSyscall(Int(ptrace), [0])  // PTRACE_TRACEME
            exit(0)
        }
    }

    @Test(.oneExitTestAtATime) func namespaceCloneFlagsKill() async {
        await #expect(processExitsWith: .signal(SIGSYS)) {
            let clone = Syscalls.number(of: "clone")!
            installStandardFilter()
            _ = rawSyscall(Int(clone), [UInt(SIGCHLD) | 0x1000_0000])  // CLONE_NEWUSER
            exit(0)
        }
    }

    @Test(.oneExitTestAtATime) func argumentConditionDecides() async {
        await #expect(processExitsWith: .success) {
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { exit(10) }
            let ioctl = Syscalls.number(of: "ioctl")!
            installStandardFilter()
            var available: Int32 = -1
            let fionread = withUnsafeMutablePointer(to: &available) {
                rawSyscall(Int(ioctl), [UInt(fds[0]), 0x541B, UInt(bitPattern: $0)])
            }
            guard fionread == 0, available == 0 else { exit(11) }  // FIONREAD is allowed
            var c: UInt8 = 65
            let tiocsti = withUnsafeMutablePointer(to: &c) {
                rawSyscall(Int(ioctl), [UInt(fds[0]), 0x5412, UInt(bitPattern: $0)])
            }
            guard tiocsti == -Int(EPERM) else { exit(12) }  // TIOCSTI is denied (unfiltered: ENOTTY)
            let hidden = withUnsafeMutablePointer(to: &c) {
                rawSyscall(Int(ioctl), [UInt(fds[0]), 0xdead_0000_5412, UInt(bitPattern: $0)])
            }
            guard hidden == -Int(EPERM) else { exit(13) }  // also with garbage in the upper bits
            exit(0)
        }
    }

    @Test(.oneExitTestAtATime) func clone3FailsWithENOSYS() async {
        await #expect(processExitsWith: .success) {
            let clone3 = Syscalls.number(of: "clone3")!
            installStandardFilter()
            // Unfiltered, clone3(NULL, 0) fails with EINVAL; the filter answers ENOSYS first.
            exit(rawSyscall(Int(clone3), [0, 0]) == -Int(ENOSYS) ? 0 : 1)
        }
    }

    @Test(.oneExitTestAtATime) func threadsAndForkStillWork() async {
        await #expect(processExitsWith: .success) {
            installStandardFilter()
            let thread = Thread { }
            thread.start()
            let pid = fork()  // glibc's fork uses clone without namespace flags
            if pid == 0 { _exit(7) }
            var status: Int32 = 0
            guard pid > 0, waitpid(pid, &status, 0) == pid, (status >> 8) & 0xff == 7 else { exit(1) }
            exit(0)
        }
    }

    @Test(.oneExitTestAtATime) func foreignArchitecturesAreKilled() async {
        await #expect(processExitsWith: .signal(SIGSYS)) {
            installStandardFilter()
            _ = rawSyscall(Int(SeccompReturn.x32SyscallBit) | 39, [])  // x32 getpid
            exit(0)
        }
    }
}
#endif
