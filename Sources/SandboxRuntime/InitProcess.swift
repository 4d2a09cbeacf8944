import CSandboxShim
import CSeccomp
import Glibc
import SandboxSystem

/// Exit of a sandbox's init without holding a pidfd for its whole life (its signals are
/// ``SandboxSignals``').
///
/// The host keeps one fd per sandbox: the init's control socket (issue 14: a host with
/// thousands of extensions ran out of fds at 7 per extension). The socket tells everything a
/// pidfd told:
///
/// - **Exit.** The init's end closes when the init exits (its fd table goes in `do_exit`),
///   so the control socket hangs up; nothing else holds that end (it is close-on-exec and
///   only the init and, until its exec, the payload share it). The init may not be a zombie
///   yet at that moment (the kernel tears down its PID namespace in between): the reap is tried
///   again for a moment, then a pidfd is opened for those last moments only, and watched until
///   it is reapable.
/// - **Identity.** While the control socket has not hung up, the init has not exited, so its
///   pid is still its own (a pid is reused only after its process is reaped). A signal goes
///   through a pidfd opened *before* that check (``SandboxSignals/killInit(pid:controlFD:)``),
///   so it can never reach another process, even when the host reaps children it did not
///   start (which it must not do: `wait(-1)`).
/// - **Reaping** is `waitpid(pid, WNOHANG)` on the supervisor's own child, once the socket has
///   hung up. It is safe while nobody else reaps the init: a host must not call `wait(-1)`
///   (or `waitpid(-1)`), the rule pidfds relieved us of only in part. With `SIGCHLD` set to
///   `SIG_IGN` (or `SA_NOCLDWAIT`) the kernel reaps by itself: then nothing is reaped here,
///   the hang-up alone ends the sandbox.
enum InitProcess {
    /// A pidfd for `pid` (close-on-exec), or nil with errno.
    static func openPidfd(_ pid: pid_t) -> FileDescriptor? {
        FileDescriptor(adopting: Int32(truncatingIfNeeded: xsb_raw_syscall6(Int(SYS_pidfd_open), UInt(pid), 0, 0, 0, 0, 0)))
    }

    /// Whether the peer of the socket `fd` has closed its end.
    static func hungUp(_ fd: FileDescriptor) -> Bool {
        var entry = pollfd(fd: fd.rawValue, events: 0, revents: 0)
        return poll(&entry, 1, 0) == 1 && entry.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0
    }

    enum ReapResult: Equatable {
        /// Reaped now, with its raw wait status.
        case exited(status: Int32)
        /// Still running (a hang-up comes a little before the exit is reapable).
        case running
        /// Already reaped by someone else (the kernel, with SIGCHLD ignored), or not ours.
        case gone
    }

    /// Reaps the init `pid` if it has exited. Call only once its control socket has hung up.
    static func reap(_ pid: pid_t) -> ReapResult {
        if kernelReapsChildren { return .gone }
        var status: Int32 = 0
        let rc = retryingInterrupts { waitpid(pid, &status, WNOHANG) }
        if rc == pid { return .exited(status: status) }
        if rc == 0 { return .running }
        return .gone  // ECHILD
    }

    /// ``reap(_:)``, tried again for up to `microseconds` while the init still runs, yielding the
    /// CPU between tries. Right after the hang-up the init is usually a few tens of microseconds
    /// from reapable (the rest of its exit: its PID namespace's end); trying again costs the
    /// monitor thread less than a pidfd, its registration and a second wake-up.
    static func reap(_ pid: pid_t, tryingFor microseconds: Int) -> ReapResult {
        var start = timespec()
        clock_gettime(CLOCK_MONOTONIC, &start)
        while true {
            let result = reap(pid)
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let elapsed = (now.tv_sec - start.tv_sec) * 1_000_000 + (now.tv_nsec - start.tv_nsec) / 1000
            if result != .running || elapsed >= microseconds { return result }
            sched_yield()
        }
    }

    /// Reaps the init `pid`, waiting for its exit (after a SIGKILL: a launch that is undone).
    static func reapBlocking(_ pid: pid_t) {
        var status: Int32 = 0
        _ = retryingInterrupts { waitpid(pid, &status, 0) }
    }

    /// SIGCHLD ignored, or SA_NOCLDWAIT: the kernel reaps every child at its exit (and a
    /// waitpid would block until all of them are gone).
    static var kernelReapsChildren: Bool {
        var action = sigaction()
        guard sigaction(SIGCHLD, nil, &action) == 0 else { return false }
        let handler = unsafeBitCast(action.__sigaction_handler.sa_handler, to: Int.self)
        return handler == 1 /* SIG_IGN */ || action.sa_flags & SA_NOCLDWAIT != 0
    }
}
