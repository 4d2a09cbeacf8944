import ExtSandbox
import ExtensionCatalog
import Foundation
import Glibc
import SandboxRuntime
import Synchronization
import Testing
import TestSupport

/// What runs is what the owner approved: the bundle's owner (here, the test) replaces the
/// approved executable while launches check it, at the moments the launch reads it, in every way
/// a file can be replaced. Unapproved code must never answer a connection; each launch either
/// runs the approved program or is refused.
@Suite("Executable swaps during a launch")
struct ExecutableSwapTests {
    /// The bundle's program, answering `word`. With `disguise`, it first forks: the child
    /// serves the connection while the parent execs the bundle's hard link to the approved file,
    /// so that the sandbox's first process looks like the approved program.
    static func program(answering word: String, disguise: Bool = false) -> String {
        HostFixtures.pythonExtension(
            reply: "b\"\(word)\"",
            prelude: disguise ? "if os.fork() != 0:\n    os.execv(\"/extension/share/run-link\", [\"run\"])" : "")
    }

    /// How the owner replaces the executable.
    enum Swap: String, CaseIterable, Sendable {
        /// The executable's directory exchanged with one holding other code, in one
        /// renameat2(RENAME_EXCHANGE): the approved file itself is untouched.
        case directoryExchange
        /// A new file renamed over the executable.
        case renameOver
        /// The executable rewritten in place (same inode).
        case rewriteInPlace
        /// The swapped-in program disguises itself with a hard link to the approved file.
        case disguisedByHardLink
    }

    /// The bundle and the owner's moves on it.
    final class Bundle: Sendable {
        let path: String
        let approved: String
        let unapproved: String

        init(world: ExtensionWorld, swap: Swap) throws {
            approved = ExecutableSwapTests.program(answering: "approved")
            unapproved = ExecutableSwapTests.program(answering: "unapproved", disguise: swap == .disguisedByHardLink)
            path = world.external + "/Race.appex"
            try world.write(path + "/extension.yaml", """
                schema: 1
                identifier: org.example.race
                name: Race
                version: "1.0"
                point: \(ExtensionWorld.openPoint)
                executable: bin/run
                resources:
                  - share/run-link
                """)
            try world.write(path + "/bin/run", approved, mode: 0o755)
            try world.write(path + "/evil/run", unapproved, mode: 0o755)
            try FileManager.default.createDirectory(atPath: path + "/share", withIntermediateDirectories: true)
            #expect(link(path + "/bin/run", path + "/share/run-link") == 0)
        }

        /// Replaces the approved program with the unapproved one, the way `swap` says.
        func replace(_ swap: Swap) {
            switch swap {
            case .directoryExchange:
                _ = ExecutableSwapTests.exchange(path + "/bin", path + "/evil")
            case .renameOver, .disguisedByHardLink:
                try? Fixtures.writeFile(path + "/bin/.run.new", Array(unapproved.utf8), mode: 0o755)
                rename(path + "/bin/.run.new", path + "/bin/run")
            case .rewriteInPlace:
                ExecutableSwapTests.rewrite(path + "/bin/run", unapproved)
            }
        }

        /// Puts the approved program back (same bytes; a new inode or new times).
        func restore(_ swap: Swap) {
            switch swap {
            case .directoryExchange:
                if (try? String(contentsOfFile: path + "/bin/run", encoding: .utf8)) != approved {
                    _ = ExecutableSwapTests.exchange(path + "/bin", path + "/evil")
                }
            case .renameOver, .disguisedByHardLink:
                try? Fixtures.writeFile(path + "/bin/.run.new", Array(approved.utf8), mode: 0o755)
                rename(path + "/bin/.run.new", path + "/bin/run")
            case .rewriteInPlace:
                ExecutableSwapTests.rewrite(path + "/bin/run", approved)
            }
        }
    }

    /// glibc's renameat2, which its Swift module does not declare (it needs _GNU_SOURCE).
    static let renameat2: @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32 = {
        unsafeBitCast(dlsym(dlopen(nil, RTLD_NOW), "renameat2")!, to: (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32).self)
    }()

    static func exchange(_ a: String, _ b: String) -> Int32 {
        renameat2(AT_FDCWD, a, AT_FDCWD, b, 2 /* RENAME_EXCHANGE */)
    }

    static func rewrite(_ path: String, _ text: String) {
        let fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }

    /// Replaces the program right after the `nth` time the launch closes the approved file it
    /// read (inotify IN_CLOSE_NOWRITE), from a thread of its own, while the launch goes on.
    final class Swapper: @unchecked Sendable {
        private let inotify: Int32
        private var thread: Thread?
        private let done = Atomic<Bool>(false)

        init(bundle: Bundle, swap: Swap, nth: Int) {
            inotify = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
            _ = inotify_add_watch(inotify, bundle.path + "/bin/run", UInt32(IN_CLOSE_NOWRITE))
            let inotify = inotify
            thread = Thread { [self] in
                var seen = 0
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !done.load(ordering: .acquiring) {
                    var poller = pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)
                    guard poll(&poller, 1, 20) > 0 else { continue }
                    let count = buffer.withUnsafeMutableBytes { read(inotify, $0.baseAddress, $0.count) }
                    guard count > 0 else { continue }
                    var offset = 0
                    while offset + MemoryLayout<inotify_event>.size <= count {
                        let length = buffer.withUnsafeBytes { $0.load(fromByteOffset: offset + 12, as: UInt32.self) }
                        offset += MemoryLayout<inotify_event>.size + Int(length)
                        seen += 1
                        if seen == nth {
                            bundle.replace(swap)
                            return
                        }
                    }
                }
            }
            thread?.start()
        }

        func stop() {
            done.store(true, ordering: .releasing)
            while thread?.isFinished == false { usleep(1000) }
            thread = nil
            close(inotify)
        }
    }

    static let launchesPerSwap = 250

    @Test("unapproved code swapped in during a launch never answers", arguments: Swap.allCases)
    func swappedExecutableNeverAnswers(swap: Swap) async throws {
        let world = try ExtensionWorld()
        let bundle = try Bundle(world: world, swap: swap)
        let (monitor, identity) = try await HostFixtures.approveAndDiscover(bundle.path, identifier: "org.example.race", in: world)
        defer { monitor.cancel() }

        var answers: [String: Int] = [:]
        for round in 0..<Self.launchesPerSwap {
            // The host reads the file more than once during a launch: swap after each of those
            // reads in turn, and (every fourth round) not at all.
            let swapper = round % 4 == 3 ? nil : Swapper(bundle: bundle, swap: swap, nth: round % 4 + 1)
            let outcome: String
            do {
                let process = try await AppExtensionProcess(configuration: .init(identity: identity))
                do {
                    let connection = try await process.makeConnection()
                    outcome = HostFixtures.text(try await connection.send(HostFixtures.message("who are you?")))
                    connection.invalidate()
                } catch {
                    outcome = "connection failed"
                }
                let sandbox = process.sandbox
                process.invalidate()
                sandbox.kill()
                _ = await HostFixtures.exit(of: sandbox)
            } catch {
                outcome = "refused"
            }
            swapper?.stop()
            bundle.restore(swap)
            answers[outcome, default: 0] += 1
            #expect(outcome != "unapproved", "round \(round): unapproved code answered the host")
        }
        print("\(swap): \(answers)")
        // Launches without a swap run the approved program.
        #expect(answers["approved", default: 0] >= Self.launchesPerSwap / 4)
    }

    /// The sealed copy is exec'd by descriptor at every level, including those that allow no
    /// exec after the launch's own (whose filter lets exactly one execveat through).
    @Test("a discovered extension runs from its sealed copy at every security level", arguments: ["standard", "hardened", "restricted"])
    func sealedCopyRunsAtEveryLevel(level: String) async throws {
        let world = try ExtensionWorld()
        try world.install("org.example.echo", executableSource: HostFixtures.productsDirectory + "/xsb-echo-extension")
        let (monitor, identity) = try await HostFixtures.approveAndDiscover(
            world.external + "/echo.appex", identifier: "org.example.echo", in: world, level: level)
        defer { monitor.cancel() }
        let process = try await AppExtensionProcess(configuration: .init(identity: identity))
        defer { process.invalidate() }
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        #expect(HostFixtures.text(try await connection.send(HostFixtures.message("hello \(level)"))) == "hello \(level)")
        // What runs is the copy: the payload's program is a memfd, not the bundle's file.
        let payload = try #require(process.sandbox.processIdentifiers().dropFirst().first)
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(payload)/exe")) ?? ""
        #expect(exe.hasPrefix("/memfd:extsandbox-program"), "\(exe)")
    }

    /// The sealed copy is host memory: a bundle's executable larger than the bound (here a
    /// sparse file of holes, which costs its author nothing) fails the launch at once, naming
    /// the file, and nothing of it is copied.
    @Test("an executable over the sealed copy's size bound is refused, naming it")
    func oversizedExecutableIsRefused() async throws {
        let world = try ExtensionWorld()
        let bundle = try world.install("org.example.huge", in: world.hostBundle + "/Extensions")
        let executable = bundle + "/bin/run"
        #expect(truncate(executable, off_t(SealedExecutable.maximumSize) + (1 << 20)) == 0)
        let point = AppExtensionPoint(name: ExtensionWorld.openPoint, scope: .init(restriction: .none),
                                      securityLevel: TestPaths.policiesDirectory + "/standard.yaml")
        let monitor = try await AppExtensionPoint.Monitor(
            points: [point], host: AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations))
        defer { monitor.cancel() }
        let identity = try #require(monitor.identities.first)
        await #expect {
            _ = try await AppExtensionProcess(configuration: .init(identity: identity))
        } throws: { error in
            let text = "\(error)"
            return text.contains(executable) && text.contains("at most 256 MiB")
        }
    }
}
