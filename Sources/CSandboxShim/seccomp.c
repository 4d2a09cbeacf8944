// seccomp, on the C side (the filter is compiled once per policy in Swift, with libseccomp:
// Sources/SandboxPolicy/SeccompCompiler.swift). The payload sets memory-deny-write-execute,
// announces the listener's fd number and loads the filter with a user-notification listener,
// last before its exec; the init's receiver thread (receiver.c) reads the listener, and every
// notified call is decided here, in xsb_seccomp_decide.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_GET_MDWE 66
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN (1UL << 0)
#endif
#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif

// MARK: - Payload side

void xsb_payload_deny_write_execute(const struct xsb_spawn_config *cfg, int status_fd) {
    // Memory-deny-write-execute: no mapping may be writable and executable, and none may gain
    // PROT_EXEC later. It is a property of the mm, kept across execve (the new mm inherits it;
    // PR_MDWE_NO_INHERIT is not set) and fork, and cannot be cleared. A cold launch's payload has
    // its own mm (the vfork shares only the fd table), so the init is not affected; a waiting
    // payload shares the init's (waiting_payload.c), so the init gets it too, which is harmless:
    // it never maps anything executable after its start. Fail closed: a kernel
    // without it (before 6.3) refuses with EINVAL and the launch stops here.
    if (cfg->memory_deny_write_execute) {
        if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0L, 0L, 0L) != 0)
            xsb_payload_fail(status_fd, XSB_STEP_MEMORY_DENY_WRITE_EXECUTE, "prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)");
        int flags = prctl(PR_GET_MDWE, 0L, 0L, 0L, 0L);
        if (flags < 0 || !(flags & (int)PR_MDWE_REFUSE_EXEC_GAIN)) {
            if (flags >= 0) errno = EINVAL;
            xsb_payload_fail(status_fd, XSB_STEP_MEMORY_DENY_WRITE_EXECUTE, "prctl(PR_GET_MDWE)");
        }
    }
}

/// The policy's open-files limit (set just before: rlimits.c) leaves no fd number for the
/// listener, which must be below it like every fd. That is the limit's failure, not the filter's
/// (nor the host's, whose fds the payload does not count): say so, with the least limit that works.
__attribute__((noreturn)) static void listener_has_no_room(int status_fd) {
    int lowest_free = 0;  // the listener's number, were there no limit
    while (fcntl(lowest_free, F_GETFD) >= 0) lowest_free++;
    char detail[128] = "open-files: the program's fds and the seccomp listener need a limit of at least ";
    size_t at = xsb_string_length(detail);
    char digits[12];
    size_t n = 0;
    for (unsigned value = (unsigned)lowest_free + 1; n == 0 || value != 0; value /= 10) digits[n++] = (char)('0' + value % 10);
    while (n > 0) detail[at++] = digits[--n];
    detail[at] = '\0';
    errno = EMFILE;
    xsb_payload_fail(status_fd, XSB_STEP_RLIMIT, detail);
}

int xsb_payload_announce_listener(const struct xsb_spawn_config *cfg, int status_fd, int announce_fd) {
    if (cfg->bpf == NULL || cfg->bpf_instructions == 0 || cfg->bpf_instructions > 0xffff) {
        errno = EINVAL;
        xsb_payload_fail(status_fd, XSB_STEP_SECCOMP, "no filter");
    }
    // The listener will be the lowest free fd. Say which before loading: after loading only
    // what the policy allows may run, and the init's receiver thread must be reading the
    // listener before our execve, which the filter may hand to it for a decision. The init's
    // main thread learns the number from the status pipe (which it reads when the vfork
    // returns), the receiver from its own pipe (at once).
    int expected = fcntl(status_fd, F_DUPFD_CLOEXEC, 0);  // the lowest free number
    if (expected < 0 && errno == EMFILE) listener_has_no_room(status_fd);
    if (expected < 0) xsb_payload_fail(status_fd, XSB_STEP_SECCOMP, "listener slot");
    close(expected);
    xsb_payload_record(status_fd, XSB_STEP_NONE, expected, "listener");
    if (announce_fd < 0) return expected;  // a waiting payload's: the init announces it (waiting_payload.c)
    int32_t announcement = expected;
    if (write(announce_fd, &announcement, sizeof announcement) != (ssize_t)sizeof announcement)
        xsb_payload_fail(status_fd, XSB_STEP_SECCOMP, "listener announcement");
    return expected;
}

void xsb_payload_load_filter(const struct xsb_spawn_config *cfg, int status_fd, int expected_listener) {
    struct sock_fprog prog = {.len = (unsigned short)cfg->bpf_instructions, .filter = (struct sock_filter *)cfg->bpf};
    // Once the receiver has read a notification, only SIGKILL may interrupt the call
    // (Linux 5.19): a stopped or signalled task cannot withdraw an exec the receiver let run.
    long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                            SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &prog);
    if (listener < 0 && errno == EINVAL)
        listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) xsb_payload_fail(status_fd, XSB_STEP_SECCOMP, "seccomp(SET_MODE_FILTER)");
    if (listener != expected_listener) {
        errno = EBADF;
        xsb_payload_fail(status_fd, XSB_STEP_SECCOMP, "listener fd");
    }
}

// MARK: - Init side: the notification decision

static int is_exec(int nr) { return nr == SYS_execve || nr == SYS_execveat; }

// Plain memory only: it runs on the receiver thread, which must not touch errno or libc state.
enum xsb_notification_verdict xsb_seccomp_decide(int nr, int withdrawn, const struct xsb_notification_state *state) {
    if (withdrawn) {
        // Audit mode: the call will run when it is made again; nothing to report. Kill mode:
        // the call was attempted, so the sandbox ends (named if it is notified again at once).
        return state->audit ? XSB_VERDICT_IGNORE : XSB_VERDICT_END_SANDBOX;
    }
    // The launch's own execve: the first execve any task of this filter makes, since the
    // program (the only source of others) runs only after it.
    if (state->supervise_first_exec && !state->first_exec_done && is_exec(nr)) return XSB_VERDICT_LET_FIRST_EXEC_RUN;
    if (state->audit) return XSB_VERDICT_LET_RUN_AUDITED;
    // The launch's own execve (nothing of the program has run yet, and no execve was let
    // run): a policy that forbids execve. The launch fails, and says why.
    if (nr >= 0 && is_exec(nr) && !state->first_exec_done && !state->exec_done) return XSB_VERDICT_FAIL_LAUNCH_EXEC;
    return XSB_VERDICT_END_SANDBOX;
}
