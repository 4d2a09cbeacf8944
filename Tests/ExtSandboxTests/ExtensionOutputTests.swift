import ExtSandbox
import Foundation
import Glibc
import Testing

/// An extension never gets the host's own standard streams (often the user's terminal) unless
/// the host passes a descriptor itself (ExtensionOutput.swift).
@Suite("Extension output")
struct ExtensionOutputTests {
    /// What the extension's program has as fd 0, 1 and 2, seen from the host.
    static func streams(of process: AppExtensionProcess) throws -> [String] {
        let program = try #require(process.sandbox.processIdentifiers().dropFirst().first)
        return (0...2).map { fd in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(program)/fd/\(fd)")) ?? "?"
        }
    }

    @Test("by default the extension's standard streams are /dev/null, not the host's")
    func discardedByDefault() async throws {
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity()))
        defer { process.invalidate() }
        let streams = try Self.streams(of: process)
        #expect(streams == ["/dev/null", "/dev/null", "/dev/null"], "the extension holds \(streams)")
    }

    @Test("a descriptor the host passes gets both output streams, as a copy: a relaunch after the host closed and reused the number gets the same pipe")
    func intoACopyOfADescriptorOfTheHost() async throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        defer { close(ends[0]) }
        let pipe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(ends[1])")
        let output = try ExtensionOutput.into(ends[1])
        // The host closes its own at once, and the number goes to another file.
        close(ends[1])
        let other = open("/dev/zero", O_RDONLY | O_CLOEXEC)
        defer { close(other) }
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(), output: output))
        defer { process.invalidate() }
        #expect(try Self.streams(of: process) == ["/dev/null", pipe, pipe])
        // The extension ends; the next connection relaunches it with the same copy.
        let first = process.sandbox
        kill(first.pid, SIGKILL)
        _ = await first.waitForExit()
        let connection = try await process.makeConnection()
        defer { connection.invalidate() }
        #expect(process.sandbox.pid != first.pid)
        #expect(try Self.streams(of: process) == ["/dev/null", pipe, pipe])
    }

    @Test("a descriptor that is not open is refused when the output is made")
    func aClosedDescriptorIsRefused() {
        #expect(throws: ExtensionError.self) { try ExtensionOutput.into(Int32.max - 1) }
    }
}
