// The payload's last steps before exec, in the order that matters: session, signals, fds,
// working directory, rlimits, capabilities, no_new_privs, memory-deny-write-execute, seccomp
// (last), execve.
//
// It runs in a vfork child of the sandbox init that shares the init's fd table, so it never
// closes an fd (that would close the init's too): it marks them close-on-exec instead.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <stdint.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_GET_MDWE 66
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN (1UL << 0)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#define XSB_SECURE_BITS                                                                              \
    (SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED | \
     SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)
#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif


static void record(int status_fd, int step, int value, const char *detail) {
    struct xsb_payload_status s;
    char *p = (char *)&s;
    for (size_t i = 0; i < sizeof s; i++) p[i] = 0;
    s.step = step;
    s.value = value;
    xsb_copy_string(s.detail, sizeof s.detail, detail);
    (void)write(status_fd, &s, sizeof s);
}

__attribute__((noreturn)) static void fail(int status_fd, int step, const char *detail) {
    record(status_fd, step, errno, detail);
    _exit(127);
}

/// Places the caller's chosen fds at 0, 1, 2, 3…; everything else becomes close-on-exec.
/// Sources first move above every target so that no dup2 overwrites a later source.
static void arrange_fds(const struct xsb_spawn_config *cfg, int status_fd) {
    size_t count = 3 + cfg->extra_fd_count;
    int floor = XSB_FD_FLOOR + (int)cfg->extra_fd_count;
    int moved[3 + XSB_MAX_EXTRA_FDS];
    if (cfg->extra_fd_count > XSB_MAX_EXTRA_FDS) {
        errno = EMFILE;
        fail(status_fd, XSB_STEP_FILE_DESCRIPTORS, "too many extra fds");
    }
    for (size_t i = 0; i < count; i++) {
        int src = i < 3 ? cfg->stdio[i] : cfg->extra_fds[i - 3];
        if (src < 0) src = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (src < 0) fail(status_fd, XSB_STEP_FILE_DESCRIPTORS, "/dev/null");
        moved[i] = fcntl(src, F_DUPFD_CLOEXEC, floor);
        if (moved[i] < 0) fail(status_fd, XSB_STEP_FILE_DESCRIPTORS, "dup");
    }
    for (size_t i = 0; i < count; i++) {
        if (dup2(moved[i], (int)i) < 0) fail(status_fd, XSB_STEP_FILE_DESCRIPTORS, "dup2");
    }
    if (syscall(SYS_close_range, (unsigned)count, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        fail(status_fd, XSB_STEP_FILE_DESCRIPTORS, "close_range");
}

static void drop_capabilities(const struct xsb_spawn_config *cfg, int status_fd) {
    // Lock the "root is special" rules off before the sets are emptied, so nothing regains a
    // capability through uid 0 semantics or ambient raising later.
    if (prctl(PR_SET_SECUREBITS, XSB_SECURE_BITS, 0, 0, 0) != 0) fail(status_fd, XSB_STEP_CAPABILITIES, "securebits");
    // Up to the kernel's last capability, whatever cap_last_cap said: EINVAL marks the end.
    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
        if (errno == EINVAL && cap > cfg->cap_last_cap) break;
        fail(status_fd, XSB_STEP_CAPABILITIES, "bounding set");
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) fail(status_fd, XSB_STEP_CAPABILITIES, "ambient set");
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    for (size_t i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) data[i].effective = data[i].permitted = data[i].inheritable = 0;
    if (syscall(SYS_capset, &header, data) != 0) fail(status_fd, XSB_STEP_CAPABILITIES, "capset");
}

void xsb_payload_main(const struct xsb_spawn_config *cfg, int announce_fd, int status_fd) {
    // The init put the status pipe above every target fd (XSB_FD_FLOOR + extra fds).
    // A new session: no controlling terminal, so nothing inside can push keystrokes (TIOCSTI)
    // into the caller's terminal or receive its job-control signals.
    if (setsid() < 0) fail(status_fd, XSB_STEP_SESSION, "setsid");

    // Ignored signals stay ignored across exec (SwiftNIO ignores SIGPIPE): reset them all.
    struct sigaction dfl;
    char *p = (char *)&dfl;
    for (size_t i = 0; i < sizeof dfl; i++) p[i] = 0;
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        if (sigaction(sig, &dfl, NULL) != 0 && errno != EINVAL) fail(status_fd, XSB_STEP_SIGNALS, "sigaction");
    }

    arrange_fds(cfg, status_fd);
    // The caller's relay pseudo-terminal as the session's controlling terminal: the terminal's
    // Ctrl-C, Ctrl-\ and window size changes then reach the program's foreground process group,
    // and a shell inside gets job control. The caller's own terminal never gets here.
    if (cfg->controlling_terminal) {
        int fd = 0;
        struct winsize size;  // TIOCGWINSZ succeeds on terminals only (isatty, as a raw ioctl)
        while (fd < 3 && ioctl(fd, TIOCGWINSZ, &size) != 0) fd++;
        if (fd < 3 && ioctl(fd, TIOCSCTTY, 0) != 0) fail(status_fd, XSB_STEP_SESSION, "TIOCSCTTY");
    }
    if (chdir(cfg->cwd) != 0) fail(status_fd, XSB_STEP_WORKING_DIRECTORY, cfg->cwd);

    for (size_t i = 0; i < cfg->rlimit_count; i++) {
        struct rlimit limit = {.rlim_cur = cfg->rlimits[i].soft, .rlim_max = cfg->rlimits[i].hard};
        if (setrlimit((__rlimit_resource_t)cfg->rlimits[i].resource, &limit) != 0) {
            char name[16] = "resource ";
            name[9] = (char)('0' + (cfg->rlimits[i].resource / 10) % 10);
            name[10] = (char)('0' + cfg->rlimits[i].resource % 10);
            fail(status_fd, XSB_STEP_RLIMIT, name);
        }
    }

    drop_capabilities(cfg, status_fd);
    // Checked now, with the sandbox's own rights, so the common exec failures are reported
    // precisely before the filter is in place.
    if (access(cfg->path, X_OK) != 0) fail(status_fd, XSB_STEP_EXEC, cfg->path);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(status_fd, XSB_STEP_NO_NEW_PRIVS, "prctl");

    // Memory-deny-write-execute: no mapping may be writable and executable, and none may gain
    // PROT_EXEC later. It is a property of the mm, kept across execve (the new mm inherits it;
    // PR_MDWE_NO_INHERIT is not set) and fork, and cannot be cleared. This payload has its own mm
    // (the vfork shares only the fd table), so the init is not affected. Fail closed: a kernel
    // without it (before 6.3) refuses with EINVAL and the launch stops here.
    if (cfg->memory_deny_write_execute) {
        if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0L, 0L, 0L) != 0)
            fail(status_fd, XSB_STEP_MEMORY_DENY_WRITE_EXECUTE, "prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)");
        int flags = prctl(PR_GET_MDWE, 0L, 0L, 0L, 0L);
        if (flags < 0 || !(flags & (int)PR_MDWE_REFUSE_EXEC_GAIN)) {
            if (flags >= 0) errno = EINVAL;
            fail(status_fd, XSB_STEP_MEMORY_DENY_WRITE_EXECUTE, "prctl(PR_GET_MDWE)");
        }
    }

    if (cfg->bpf == NULL || cfg->bpf_instructions == 0 || cfg->bpf_instructions > 0xffff) {
        errno = EINVAL;
        fail(status_fd, XSB_STEP_SECCOMP, "no filter");
    }
    // The listener will be the lowest free fd. Say which before loading: after loading only
    // what the policy allows may run, and the init's receiver thread must be reading the
    // listener before our execve, which the filter may hand to it for a decision. The init's
    // main thread learns the number from the status pipe (which it reads when the vfork
    // returns), the receiver from its own pipe (at once).
    int expected = fcntl(0, F_DUPFD_CLOEXEC, 0);
    if (expected < 0) fail(status_fd, XSB_STEP_SECCOMP, "listener slot");
    close(expected);
    record(status_fd, XSB_STEP_NONE, expected, "listener");
    int32_t announcement = expected;
    if (write(announce_fd, &announcement, sizeof announcement) != (ssize_t)sizeof announcement)
        fail(status_fd, XSB_STEP_SECCOMP, "listener announcement");

    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) fail(status_fd, XSB_STEP_SIGNALS, "sigprocmask");

    struct sock_fprog prog = {.len = (unsigned short)cfg->bpf_instructions, .filter = (struct sock_filter *)cfg->bpf};
    // Once the receiver has read a notification, only SIGKILL may interrupt the call
    // (Linux 5.19): a stopped or signalled task cannot withdraw an exec the receiver let run.
    long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                            SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &prog);
    if (listener < 0 && errno == EINVAL)
        listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) fail(status_fd, XSB_STEP_SECCOMP, "seccomp(SET_MODE_FILTER)");
    if (listener != expected) {
        errno = EBADF;
        fail(status_fd, XSB_STEP_SECCOMP, "listener fd");
    }

    // From here on the policy's filter applies: it must allow execve, write and exit_group.
    execve(cfg->path, cfg->argv, cfg->envp);
    fail(status_fd, XSB_STEP_EXEC, cfg->path);
}
