import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem

/// The supervisor's open-file limit (RLIMIT_NOFILE).
///
/// The soft limit is commonly 1,024 while the hard limit is far higher (524,288 under systemd):
/// the soft default protects old programs that use `select(2)`, which cannot watch fds above
/// 1,023. The supervisor uses epoll only, and holds one fd per sandbox (two per running
/// extension, plus one per open connection), so it raises its soft limit to the hard limit
/// once, when it starts, as Go's runtime, systemd and container runtimes do. Sandboxes whose
/// policy sets no `open-files` limit get the soft limit the process started with, as they
/// would have without the raise (``ResourceLimitPlan``).
enum FileDescriptorLimit {
    /// The limit the process had before the supervisor raised it.
    static let original: rlimit = {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &limit) == 0 else { return rlimit(rlim_cur: 1024, rlim_max: 1024) }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            // Cannot fail for soft ≤ hard; should it, the old limit simply stays.
            _ = setrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &raised)
        }
        return limit
    }()

    /// Raises the soft limit to the hard limit (once per process).
    static func raise() { _ = original }

    /// The current limit.
    static var current: rlimit {
        var limit = rlimit()
        _ = getrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &limit)
        return limit
    }

    /// How many fds the process has open (a directory listing: call it only on failure), or
    /// nil when not even the listing could be opened (every fd below the limit is taken).
    static func openCount() -> Int? {
        (SystemFiles.entries("/proc/self/fd")?.count).map { $0 - 1 }  // minus the listing's own
    }

    /// Whether `error` says the process (EMFILE) or the system (ENFILE) is out of fds.
    static func isExhaustion(_ errorNumber: Int32) -> Bool { errorNumber == EMFILE || errorNumber == ENFILE }

    /// What a launch that ran out of fds says: how many are open, the limit, what to do.
    static func exhaustionAdvice(_ errorNumber: Int32) -> String {
        if errorNumber == ENFILE {
            return "the system's file table is full (fs.file-max): end sandboxes or processes, or raise fs.file-max"
        }
        let limit = current
        let open = openCount().map { "\($0)" } ?? "all \(limit.rlim_cur)"
        return "the host has \(open) file descriptors open and its limit (RLIMIT_NOFILE) is \(limit.rlim_cur) "
            + "(hard \(limit.rlim_max)); each running sandbox holds 1, a running extension 2 plus 1 per open connection. "
            + "End sandboxes, or raise the hard limit (`ulimit -Hn`, systemd's LimitNOFILE=): the supervisor raises its "
            + "soft limit to the hard limit when it starts"
    }
}
