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

    @Test("a descriptor the host passes gets both output streams, and the host keeps its own")
    func intoADescriptorOfTheHost() async throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        defer { close(ends[0]) }
        let pipe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(ends[1])")
        let process = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(), output: .fileDescriptor(ends[1])))
        defer { process.invalidate() }
        #expect(try Self.streams(of: process) == ["/dev/null", pipe, pipe])
        #expect(fcntl(ends[1], F_GETFD) >= 0, "the host's descriptor stays open")
        close(ends[1])
    }
}
