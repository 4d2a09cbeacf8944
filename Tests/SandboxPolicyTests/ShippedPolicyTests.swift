#if os(Linux)
import CSeccomp
import Foundation
import Glibc
import Testing
import TestSupport
@testable import SandboxPolicy

let shippedLevels = ["standard", "restricted", "hardened"]

func shippedPolicyPath(_ name: String) -> String {
    packageRoot.appendingPathComponent("Policies/\(name).yaml").path
}

/// The level's filter for the kernel alone, as tests and the throwaway loader that traced the
/// hardened level use it: `allow-exec-after-start: false` needs the supervisor, so here execve is
/// simply allowed (the test process execs the program itself) and execveat is left to the default.
func inKernelFilterForTesting(_ name: String) -> CompiledSeccompFilter? {
    guard var policy = try? PolicyLoader.load(file: shippedPolicyPath(name)) else { return nil }
    policy.seccomp.allowExecAfterStart = true
    policy.seccomp.rules.removeAll { $0.syscall == "execve" || $0.syscall == "execveat" }
    policy.seccomp.rules.append(SyscallRule(syscall: "execve", action: .allow))
    return try? policy.compileSeccompFilter(mode: .inKernel)
}

/// For exit-test bodies only: installs a level's in-kernel filter into this (child) process.
private func install(_ name: String) {
    guard let filter = inKernelFilterForTesting(name) else { exit(90) }
    let rc = filter.program.withUnsafeBytes { xsb_install_seccomp_program($0.baseAddress, $0.count) }
    if rc != 0 { exit(91) }
}

/// For exit-test bodies only: replaces this process with `argv`, output to /dev/null.
private func execQuietly(_ argv: [String]) -> Never {
    let null = open("/dev/null", O_RDWR)
    dup2(null, 0)
    dup2(null, 1)
    var cArgs = argv.map { strdup($0) } + [nil]
    execv(argv[0], &cArgs)
    exit(97)
}

private func rawSyscall(_ name: String, _ a: [UInt] = []) -> Int {
    guard let nr = Syscalls.number(of: name) else { exit(92) }
    let args = a + [UInt](repeating: 0, count: 6 - a.count)
    let r = xsb_raw_syscall6(Int(nr), args[0], args[1], args[2], args[3], args[4], args[5])
    return r < 0 ? -Int(errno) : r
}

@Suite("Shipped levels", .offThePool)
struct ShippedPolicyTests {
    @Test(arguments: shippedLevels)
    func loadsWithoutProblems(_ name: String) throws {
        #expect(PolicyLoader.check(file: shippedPolicyPath(name)) == [])
        let policy = try PolicyLoader.load(file: shippedPolicyPath(name))
        #expect(policy.name == name)
        #expect(!policy.description.isEmpty)
        #expect(policy.network == .none)
        #expect(policy.seccomp.defaultAction == .killProcess)
        // No dangerous system call runs without a reason.
        for rule in policy.seccomp.rules where DangerousSyscalls.contains(rule.syscall) {
            #expect(rule.action != .allow && rule.action != .log || rule.justification != nil, "\(name): \(rule.syscall)")
        }
    }

    /// Admins read these files: every line that says something has a comment (block texts
    /// such as `description: >-` and `why: >-` are comments themselves).
    @Test(arguments: shippedLevels)
    func everyLineIsCommented(_ name: String) throws {
        let text = try String(contentsOfFile: shippedPolicyPath(name), encoding: .utf8)
        var blockIndent: Int?
        var uncommented: [String] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let indent = line.prefix(while: { $0 == " " }).count
            let content = line.dropFirst(indent)
            if content.isEmpty { continue }
            if let b = blockIndent, indent > b { continue }
            blockIndent = nil
            if content.hasPrefix("#") { continue }
            if content.hasPrefix("why:") {  // a justification is prose for admins, like a comment
                let code = (content.range(of: " #").map { content[..<$0.lowerBound] } ?? content)
                    .trimmingCharacters(in: .whitespaces)
                if code.hasSuffix(">-") || code.hasSuffix("|") || code.hasSuffix(">") { blockIndent = indent }
                continue
            }
            guard let hash = content.range(of: " #") else {
                uncommented.append("\(number + 1): \(line)")
                continue
            }
            let code = content[..<hash.lowerBound].trimmingCharacters(in: .whitespaces)
            if code.hasSuffix(">-") || code.hasSuffix("|") || code.hasSuffix(">") { blockIndent = indent }
        }
        #expect(uncommented == [], "\(name).yaml lines without a comment:\n\(uncommented.joined(separator: "\n"))")
    }

    @Test(arguments: shippedLevels, [FilterMode.supervised, .inKernel])
    func compilesWhereAllowed(_ name: String, mode: FilterMode) throws {
        let policy = try PolicyLoader.load(file: shippedPolicyPath(name))
        if policy.seccomp.allowExecAfterStart || mode == .supervised {
            let filter = try policy.compileSeccompFilter(mode: mode)
            #expect(filter.instructionCount > 10)
            let execve = filter.evaluate(syscall: Syscalls.number(of: "execve")!, arguments: [])
            #expect(execve == (policy.seccomp.allowExecAfterStart ? SeccompReturn.allow : SeccompReturn.userNotif))
        } else {
            #expect {
                try policy.compileSeccompFilter(mode: mode)
            } throws: { error in
                (error as? PolicyError)?.message.contains("allow-exec-after-start: false cannot be compiled for the kernel alone") == true
            }
        }
    }

    @Test func standardAllowsExecRestrictedAndHardenedDoNot() throws {
        #expect(try PolicyLoader.load(file: shippedPolicyPath("standard")).seccomp.allowExecAfterStart)
        #expect(try !PolicyLoader.load(file: shippedPolicyPath("restricted")).seccomp.allowExecAfterStart)
        #expect(try !PolicyLoader.load(file: shippedPolicyPath("hardened")).seccomp.allowExecAfterStart)
    }

    @Test func restrictedHasNoSocketsButUsesTheChannel() throws {
        let policy = try PolicyLoader.load(file: shippedPolicyPath("restricted"))
        let filter = try policy.compileSeccompFilter(mode: .supervised)
        func eval(_ name: String, _ args: [UInt64] = []) -> UInt32 {
            filter.evaluate(syscall: Syscalls.number(of: name)!, arguments: args)
        }
        let eperm = SeccompReturn.errno | 1
        for name in ["socket", "socketpair", "connect", "bind", "listen", "accept", "accept4"] {
            #expect(eval(name, [1, 1]) == eperm, "\(name)")
        }
        for name in ["read", "write", "sendmsg", "recvmsg", "sendto", "recvfrom", "shutdown", "openat", "fork", "pipe2"] {
            #expect(eval(name) == SeccompReturn.allow, "\(name)")
        }
        #expect(eval("execve") == SeccompReturn.userNotif)
        #expect(eval("execveat") == SeccompReturn.userNotif)
        #expect(eval("ptrace") == SeccompReturn.userNotif)
        #expect(eval("clone", [0x1200011]) == SeccompReturn.allow)  // fork's flags
        #expect(eval("clone", [0x1200011 | 0x1000_0000]) == SeccompReturn.userNotif)  // CLONE_NEWUSER
        #expect(policy.filesystem.mounts.contains(.tmpfs(destination: "/tmp", sizeBytes: 128 << 20)))
        #expect(!policy.filesystem.mounts.contains { if case .bind(_, _, true, _) = $0 { true } else { false } })
    }

    @Test func hardenedIsSmall() throws {
        let policy = try PolicyLoader.load(file: shippedPolicyPath("hardened"))
        let filter = try policy.compileSeccompFilter(mode: .supervised)
        func eval(_ name: String, _ args: [UInt64] = []) -> UInt32 {
            filter.evaluate(syscall: Syscalls.number(of: name)!, arguments: args)
        }
        let kill = SeccompReturn.userNotif
        let eacces = SeccompReturn.errno | 13
        #expect(eval("read") == SeccompReturn.allow)
        #expect(eval("write") == SeccompReturn.allow)
        #expect(eval("recvmsg") == SeccompReturn.allow)
        #expect(eval("sendmsg") == SeccompReturn.allow)
        #expect(eval("exit_group") == SeccompReturn.allow)
        #expect(eval("clock_nanosleep") == SeccompReturn.allow)
        // A local socket fails quietly (libdispatch's syslog); any other socket kills.
        #expect(eval("socket", [1, 1]) == eacces)
        #expect(eval("socket", [2, 1]) == kill)
        #expect(eval("socket", [10, 1]) == kill)
        #expect(eval("socketpair", [1, 1]) == kill)
        #expect(eval("connect") == kill)
        #expect(eval("fork") == kill)
        #expect(eval("execve") == kill)
        #expect(eval("ptrace") == kill)
        #expect(eval("kill") == kill)
        #expect(eval("unlink") == kill)
        #expect(eval("clone", [0x3d0f00]) == SeccompReturn.allow)  // pthread_create's flags
        #expect(eval("clone", [0x1200011]) == kill)  // fork's flags
        #expect(eval("clone", [0x3d0f00 | 0x1000_0000]) == kill)  // a thread in a new user namespace
        #expect(eval("openat", [0, 0, 0x80000]) == SeccompReturn.allow)  // O_RDONLY | O_CLOEXEC
        #expect(eval("openat", [0, 0, 0x241]) == eacces)  // O_WRONLY | O_CREAT | O_TRUNC
        #expect(eval("openat", [0, 0, 0x40]) == eacces)  // O_RDONLY | O_CREAT
        #expect(eval("mmap", [0, 4096, 5, 0x802, 3]) == SeccompReturn.allow)  // a library's code
        #expect(eval("mmap", [0, 4096, 7, 0x22]) == eacces)  // executable anonymous memory
        #expect(eval("mprotect", [0, 4096, 5]) == eacces)
        #expect(eval("mprotect", [0, 4096, 1]) == SeccompReturn.allow)
        #expect(eval("prctl", [15]) == SeccompReturn.allow)  // PR_SET_NAME
        #expect(eval("prctl", [4]) == SeccompReturn.errno | 22)  // PR_SET_DUMPABLE
        #expect(eval("ioctl", [1, 0x5401]) == SeccompReturn.errno | 25)  // TCGETS: not a terminal
        #expect(policy.filesystem.mounts.allSatisfy { if case .bind(_, _, false, true) = $0 { true } else { false } })
        #expect(policy.environment.pass == [])
    }
}

@Suite("Shipped levels in a real process")
struct ShippedLevelExitTests {
    @Test(.oneExitTestAtATime) func hardenedKillsAProcessThatOpensASocket() async {
        await #expect(processExitsWith: .signal(SIGSYS)) {
            install("hardened")
            _ = rawSyscall("socket", [2, 1, 0])  // AF_INET, SOCK_STREAM
            exit(0)
        }
    }

    @Test(.oneExitTestAtATime) func hardenedLetsACProgramStart() async {
        await #expect(processExitsWith: .success) {
            install("hardened")
            execQuietly(["/bin/true"])
        }
    }

    @Test(.oneExitTestAtATime) func hardenedLetsASwiftProgramStart() async {
        // The CLI's commands (`extsandbox --help` execs them with execveat, which this test's
        // filter leaves out): dynamically linked against the Swift runtime and Foundation.
        await #expect(processExitsWith: .success) {
            let cli = TestPaths.product("extsandbox-commands")
            guard access(cli, X_OK) == 0 else { exit(96) }
            install("hardened")
            execQuietly([cli, "--help"])
        }
    }

    @Test(.oneExitTestAtATime) func restrictedRefusesSocketsButNotTheChannel() async {
        await #expect(processExitsWith: .success) {
            var fds: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { exit(10) }
            install("restricted")
            guard rawSyscall("socket", [1, 1, 0]) == -Int(EPERM) else { exit(11) }
            var more: [Int32] = [0, 0]
            guard rawSyscall("socketpair", [1, 1, 0, UInt(bitPattern: more.withUnsafeMutableBufferPointer { Int(bitPattern: $0.baseAddress) })]) == -Int(EPERM) else { exit(12) }
            var byte: UInt8 = 42
            guard send(fds[0], &byte, 1, 0) == 1 else { exit(13) }
            var got: UInt8 = 0
            guard recv(fds[1], &got, 1, 0) == 1, got == 42 else { exit(14) }
            exit(0)
        }
    }
}
#endif
