import ExtSandbox
import Foundation
import Glibc
import Logging
import Metrics
import MetricsTestKit
import SandboxRuntime
import Synchronization
import Testing
import TestSupport

/// Lifecycle and security events as swift-log records with structured metadata, and
/// swift-metrics counters.
@Suite("Host API observability")
struct TelemetryTests {
    /// Collects log records (a LogHandler of the test's own, given through the configuration).
    final class Records: Sendable {
        struct Record: Sendable { var level: Logger.Level; var message: String; var metadata: [String: String] }
        let records = Mutex<[Record]>([])
        var all: [Record] { records.withLock { $0 } }

        var logger: Logger {
            Logger(label: "test") { _ in Handler(records: self) }
        }

        struct Handler: LogHandler {
            let records: Records
            var metadata: Logger.Metadata = [:]
            var logLevel: Logger.Level = .trace
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { metadata[key] }
                set { metadata[key] = newValue }
            }
            func log(event: LogEvent) {
                let merged = metadata.merging(event.metadata ?? [:]) { $1 }
                records.records.withLock {
                    $0.append(Record(level: event.level, message: "\(event.message)", metadata: merged.mapValues { "\($0)" }))
                }
            }
        }
    }

    @Test("launch, suspend, seccomp violation and termination are logged with their metadata")
    func logRecords() async throws {
        let records = Records()
        let identity = HostFixtures.identity(level: "hardened")
        let process = try await AppExtensionProcess(configuration: .init(
            identity: identity, suspendAfter: .milliseconds(50), logger: records.logger))
        defer { process.invalidate() }
        let pid = "\(process.sandbox.pid)"
        let launched = try #require(records.all.first { $0.message == "extension launched" })
        #expect(launched.level == .info)
        #expect(launched.metadata["identifier"] == identity.bundleIdentifier && launched.metadata["pid"] == pid
                && launched.metadata["policy"] == "hardened" && launched.metadata["executable"] == identity.executablePath,
                "\(launched.metadata)")
        #expect(await HostFixtures.eventually { records.all.contains { $0.message == "extension suspended" && $0.metadata["pid"] == pid } })
        let connection = try await process.makeConnection()
        _ = try? await connection.send(HostFixtures.message("socket"))
        #expect(await HostFixtures.eventually { records.all.contains { $0.message == "extension killed: seccomp violation" } })
        let violation = try #require(records.all.first { $0.message == "extension killed: seccomp violation" })
        #expect(violation.level == .error && violation.metadata["syscall"] == "socket" && violation.metadata["pid"] == pid,
                "\(violation.metadata)")

        // An idle end on purpose: terminated, not interrupted.
        let other = try await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(), logger: records.logger))
        let otherPID = "\(other.sandbox.pid)"
        other.invalidate()
        #expect(await HostFixtures.eventually { records.all.contains { $0.message == "extension terminated" && $0.metadata["pid"] == otherPID } })
    }

    @Test("launches, interruptions by reason, violations and open connections are counted", .oneExitTestAtATime)
    func counters() async {
        // In a process of its own: the metrics system is bootstrapped once per process.
        await #expect(processExitsWith: .success) {
            func fail(_ why: String) -> Never {
                FileHandle.standardError.write(Data("\(why)\n".utf8))
                exit(1)
            }
            let metrics = TestMetrics()
            MetricsSystem.bootstrap(metrics)
            guard let process = try? await AppExtensionProcess(configuration: .init(identity: HostFixtures.identity(level: "hardened"))),
                  let connection = try? await process.makeConnection() else { fail("no connection") }
            if metrics.counterTotal(label: "extsandbox_launches_total") != 1 { fail("launches") }
            guard let open = try? metrics.expectMeter("extsandbox_open_connections"), open.lastValue == 1 else { fail("open connections") }
            _ = try? await connection.send(HostFixtures.message("socket"))
            _ = await HostFixtures.eventually { metrics.counterTotal(label: "extsandbox_seccomp_violations_total") == 1 }
            if metrics.counterTotal(label: "extsandbox_seccomp_violations_total", dimensions: [("syscall", "socket")]) != 1 { fail("violations") }
            if metrics.counterTotal(label: "extsandbox_interruptions_total", dimensions: [("reason", "seccomp_violation")]) != 1 { fail("interruptions") }
            if open.lastValue != 0 { fail("open connections after the end: \(String(describing: open.lastValue))") }
            process.invalidate()
            exit(0)
        }
    }
}
