import CSandboxShim
import Glibc
import SandboxPolicy

/// Turns a policy's limits into rlimits, which apply always (cgroups only where available).
///
/// RLIMIT_NPROC counts per user *per user namespace* on current kernels, and every sandbox
/// has its own user namespace, so it acts as a per-sandbox process limit even for root.
/// Values never exceed the supervisor's own hard limits (an unprivileged process cannot raise
/// them, and a lower limit is only ever stricter).
struct ResourceLimitPlan {
    let rlimits: [xsb_rlimit]

    init(_ limits: ResourceLimits) {
        var result: [xsb_rlimit] = []
        func add(_ resource: Int, _ value: UInt64?) {
            guard let value else { return }
            var current = rlimit()
            getrlimit(__rlimit_resource_t(resource), &current)
            let capped = min(value, UInt64(current.rlim_max))
            result.append(xsb_rlimit(resource: Int32(resource), soft: capped, hard: capped))
        }
        add(XSB_RLIMIT_AS, limits.memoryBytes)
        add(XSB_RLIMIT_NPROC, limits.processes)
        add(XSB_RLIMIT_CPU, limits.cpuSeconds)
        if limits.openFiles != nil {
            add(XSB_RLIMIT_NOFILE, limits.openFiles)
        } else {
            // The supervisor raised its own soft limit (FileDescriptorLimit): the sandbox gets
            // the one the process started with, as it would have without the raise.
            let original = FileDescriptorLimit.original
            var current = rlimit()
            getrlimit(__rlimit_resource_t(XSB_RLIMIT_NOFILE), &current)
            result.append(xsb_rlimit(resource: Int32(XSB_RLIMIT_NOFILE), soft: UInt64(min(original.rlim_cur, current.rlim_max)), hard: UInt64(current.rlim_max)))
        }
        add(XSB_RLIMIT_FSIZE, limits.fileSizeBytes)
        // No core files: they would land in the sandbox's writable places with its memory.
        add(XSB_RLIMIT_CORE, 0)
        // No real-time scheduling and no nice below the default, whatever the supervisor was
        // given: its limits are inherited otherwise, and with the host's RLIMIT_RTPRIO (audio
        // groups often have 95) a SCHED_FIFO busy loop in the sandbox starves the host's CPUs
        // (no CAP_SYS_NICE is needed under the limit). Lowering a limit never fails.
        add(XSB_RLIMIT_RTPRIO, 0)
        add(XSB_RLIMIT_NICE, 0)
        rlimits = result
    }
}
