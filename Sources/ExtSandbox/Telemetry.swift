import Logging
import Metrics
import SandboxRuntime

/// Lifecycle and security events of extension processes: structured log records (swift-log)
/// and counters (swift-metrics), so that a host routes them to its own backends
/// (``AppExtensionProcess/Configuration/logger``, silent by default; `MetricsSystem.bootstrap`).
///
/// Log records (metadata keys in brackets): `launched` (info: identifier, point, policy,
/// executable, pid, launch_ms), `suspended`, `resumed` (debug: identifier, pid), `terminated`
/// (info: identifier, pid), `interrupted` (warning: identifier, pid, reason; error level with
/// `syscall` for a seccomp violation, `limit` for a memory or wall-clock limit).
///
/// Metrics: `extsandbox_launches_total`, `extsandbox_interruptions_total` (dimension `reason`:
/// exited, signaled, seccomp_violation, memory_limit, wall_clock_limit, killed),
/// `extsandbox_seccomp_violations_total` (dimension `syscall`), `extsandbox_terminations_total`,
/// `extsandbox_open_connections` (a meter: connections open now).
enum Telemetry {
    static let launches = Counter(label: "extsandbox_launches_total")
    static let terminations = Counter(label: "extsandbox_terminations_total")
    static let openConnections = Meter(label: "extsandbox_open_connections")

    static func interruption(_ termination: Termination) -> Counter {
        Counter(label: "extsandbox_interruptions_total", dimensions: [("reason", reason(termination))])
    }

    static func violation(syscall: String) -> Counter {
        Counter(label: "extsandbox_seccomp_violations_total", dimensions: [("syscall", syscall)])
    }

    static func reason(_ termination: Termination) -> String {
        switch termination {
        case .exited: "exited"
        case .signaled: "signaled"
        case .seccompViolation: "seccomp_violation"
        case .memoryLimitExceeded: "memory_limit"
        case .wallClockLimitExceeded: "wall_clock_limit"
        case .killed: "killed"
        }
    }

    /// Logs and counts an unexpected end.
    static func interrupted(_ termination: Termination, logger: Logger, metadata: Logger.Metadata) {
        interruption(termination).increment()
        var metadata = metadata
        metadata["reason"] = "\(termination)"
        switch termination {
        case .seccompViolation(let syscall):
            let name = syscall ?? "foreign-architecture or x32 system call"
            violation(syscall: name).increment()
            metadata["syscall"] = "\(name)"
            logger.error("extension killed: seccomp violation", metadata: metadata)
        case .memoryLimitExceeded:
            metadata["limit"] = "memory"
            logger.error("extension killed: limit hit", metadata: metadata)
        case .wallClockLimitExceeded:
            metadata["limit"] = "wall_clock"
            logger.error("extension killed: limit hit", metadata: metadata)
        default:
            logger.warning("extension interrupted", metadata: metadata)
        }
    }
}
