import Foundation
import Glibc
@testable import SandboxRuntime
import SandboxSystem
import Testing
import TestSupport

/// A flag shared with a plain thread.
final class SharedValue<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.lock(); defer { lock.unlock() }; return stored }
        set { lock.lock(); stored = newValue; lock.unlock() }
    }
}

/// Issue 9 items 8 (bind sources through symlinks) and 9 (unix sockets in binds).
@Suite("Bind sources", .offThePool)
struct BindSourceTests {
    /// A directory tree for one test: `base` (0755) with `private/secret` (readable by anyone,
    /// bound by no policy) and `w` (writable by anyone, for a sandbox to plant things in).
    struct Tree {
        let base: String
        var privateDirectory: String { base + "/private" }
        var writable: String { base + "/w" }

        init() throws {
            var template = Array("/tmp/xsb-bindsrc-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
            base = String(cString: made)
            chmod(base, 0o755)
            try FileManager.default.createDirectory(atPath: base + "/private", withIntermediateDirectories: false)
            chmod(base + "/private", 0o755)
            try "the private text\n".write(toFile: base + "/private/secret", atomically: false, encoding: .utf8)
            chmod(base + "/private/secret", 0o644)
            try FileManager.default.createDirectory(atPath: base + "/w", withIntermediateDirectories: false)
            chmod(base + "/w", 0o777)
        }

        func remove() { try? FileManager.default.removeItem(atPath: base) }
    }

    /// Before: the second launch resolved DIR/x with realpath and showed the private directory.
    @Test("a symlink a sandbox planted in its writable bind is not followed by a later bind", arguments: Fixtures.Caller.allCases)
    func plantedSymlinkIsRefused(caller: Fixtures.Caller) async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let plant = try await Fixtures.exec(["/bin/ln", "-s", tree.privateDirectory, "/w/x"], options: ["--bind", "\(tree.writable):/w"], as: caller)
        try #require(plant.status == 0, "\(plant.stderr)")
        let read = try await Fixtures.exec(["/bin/cat", "/x/secret"], options: ["--ro-bind", "\(tree.writable)/x:/x"], as: caller)
        #expect(read.status == 125, "\(read.stdout)\(read.stderr)")
        #expect(!read.stdout.contains("private text"))
        #expect(read.stderr.contains("symlink"), "\(read.stderr)")
        // The same through a planted symlink in the middle of the path.
        let middle = try await Fixtures.exec(["/bin/cat", "/x"], options: ["--ro-bind", "\(tree.writable)/x/secret:/x"], as: caller)
        #expect(middle.status == 125 && !middle.stdout.contains("private text"), "\(middle.stdout)\(middle.stderr)")
        #expect(middle.stderr.contains("goes through symlink"), "\(middle.stderr)")
    }

    @Test("root-owned symlinks on the way are followed (as /lib -> usr/lib is)", arguments: Fixtures.Caller.allCases)
    func rootOwnedSymlinksWork(caller: Fixtures.Caller) async throws {
        guard getuid() == 0 else {
            print("skipped: making a root-owned symlink needs root (the test runs as uid \(getuid()))")
            return
        }
        let tree = try Tree()
        defer { tree.remove() }
        try FileManager.default.createSymbolicLink(atPath: tree.base + "/link", withDestinationPath: "private")
        let result = try await Fixtures.exec(["/bin/cat", "/x/secret"], options: ["--ro-bind", "\(tree.base)/link:/x"], as: caller)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "the private text\n")
    }

    @Test("a policy that adds /etc to standard's /etc/localtime (a host symlink) launches, and shows the link once")
    func symlinkUnderAWholeBind() async throws {
        guard let text = SystemFiles.linkTarget("/etc/localtime") else {
            print("skipped: /etc/localtime is not a symlink on this host")
            return
        }
        let output = OutputPipe()
        var configuration = try SandboxPoolTests.shell("readlink /etc/localtime; echo end", stdout: output.writeFD)
        configuration.policy.filesystem.mounts.append(.bind(source: "/etc", destination: "/etc", writable: false, optional: false))
        let process = try await Supervisor().launch(configuration)
        output.closeWriteEnd()
        #expect(await output.waitFor("end\n") == "\(text)\nend\n")
        #expect(await process.waitForExit() == .exited(code: 0))
    }

    @Test("the resolver follows root-owned links with .. and chains, and stops at loops")
    func resolver() throws {
        guard getuid() == 0 else {
            print("skipped: root-owned symlinks need root (the test runs as uid \(getuid()))")
            return
        }
        let tree = try Tree()
        defer { tree.remove() }
        let fm = FileManager.default
        try fm.createSymbolicLink(atPath: tree.base + "/up", withDestinationPath: "w/../private")
        try fm.createSymbolicLink(atPath: tree.base + "/chain", withDestinationPath: tree.base + "/up")
        try fm.createSymbolicLink(atPath: tree.base + "/loop", withDestinationPath: "loop")
        #expect(try BindSource.resolved(tree.base + "/chain/secret").path == tree.privateDirectory + "/secret")
        #expect(try BindSource.resolved(tree.base + "/up/../w/./").path == tree.writable)
        let loop = #expect(throws: SandboxError.self) { try BindSource.resolved(tree.base + "/loop").path }
        #expect(loop?.errorNumber == ELOOP)
        let missing = #expect(throws: SandboxError.self) { try BindSource.resolved(tree.base + "/chain/none").path }
        #expect(missing?.errorNumber == ENOENT)
        // Not root's: refused even when it points somewhere harmless.
        try fm.createSymbolicLink(atPath: tree.base + "/theirs", withDestinationPath: "private")
        lchown(tree.base + "/theirs", 65534, 65534)
        let theirs = #expect(throws: SandboxError.self) { try BindSource.resolved(tree.base + "/theirs").path }
        #expect(theirs?.errorNumber == EPERM)
    }

    /// The source is checked on the host, then bound by the sandbox's init: a sandbox that swaps
    /// the checked directory for a symlink in between must not win. The init opens the checked
    /// path with RESOLVE_NO_SYMLINKS, so a swapped-in symlink fails that launch instead.
    @Test("a symlink swapped in between the check and the mount is not followed")
    func swapBetweenCheckAndMount() async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let fm = FileManager.default
        let real = tree.writable + "/real", link = tree.writable + "/link", x = tree.writable + "/x"
        try fm.createDirectory(atPath: real, withIntermediateDirectories: false)
        try "the bound text\n".write(toFile: real + "/secret", atomically: false, encoding: .utf8)
        try fm.createSymbolicLink(atPath: link, withDestinationPath: tree.privateDirectory)
        lchown(link, 65534, 65534)  // as a sandbox would have left it
        try fm.moveItem(atPath: real, toPath: x)
        // Swap x between the directory and the symlink as fast as rename goes (renameat2 with
        // RENAME_EXCHANGE would be atomic; two renames leave x missing for a moment, which a
        // launch may also meet).
        let stop = SharedValue(false)
        let swapper = Thread {
            var toggle = false
            while !stop.value {
                toggle.toggle()
                _ = rename(x, toggle ? real : link) == 0 && rename(toggle ? link : real, x) == 0
            }
        }
        swapper.start()
        defer { stop.value = true }
        var outcomes: [String: Int] = [:]
        for _ in 0..<40 {
            let pipe = OutputPipe()
            var config = try Fixtures.probeConfiguration(["exit", "0"])
            config.executable = "/bin/cat"
            config.arguments = ["cat", "/x/secret"]
            config.standardOutput = .fileDescriptor(borrowed(pipe.writeFD))
            config.extraMounts = [.bind(source: x, destination: "/x", writable: false, optional: false)]
            do {
                let process = try await Supervisor.shared.launch(config)
                _ = await process.waitForExit()
                pipe.closeWriteEnd()
                let text = await pipe.waitFor("\n", seconds: 2)
                #expect(!text.contains("private text"), "the swapped-in symlink was followed")
                outcomes[text.contains("bound text") ? "bound the directory" : "ran, read nothing", default: 0] += 1
            } catch {
                outcomes["refused: \(error.errorNumber == ELOOP ? "ELOOP at mount" : error.errorNumber == EPERM ? "symlink at check" : "errno \(error.errorNumber)")", default: 0] += 1
            }
        }
        print("swap race outcomes: \(outcomes)")
    }

    /// Before: the socket was bound, and connect() through a read-only bind works.
    @Test("a unix socket is refused as a bind source", arguments: Fixtures.Caller.allCases)
    func socketSourceIsRefused(caller: Fixtures.Caller) async throws {
        let tree = try Tree()
        defer { tree.remove() }
        let path = tree.writable + "/daemon.sock"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0)
        chmod(path, 0o777)
        let result = try await Fixtures.exec(["/bin/true"], options: ["--ro-bind", "\(path):/run/daemon.sock"], as: caller)
        #expect(result.status == 125, "\(result.stderr)")
        #expect(result.stderr.contains("unix socket"), "\(result.stderr)")
    }
}
