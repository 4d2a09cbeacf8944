// A pre-built sandbox's payload that waits for its launch. Most of what payload.c does before
// the exec depends only on the shape (session, signals, rlimits, capabilities, no_new_privs,
// memory-deny-write-execute and, the dearest, loading the filter), so a pre-built sandbox whose
// filter allows it starts its payload with the shape: the payload does those steps and waits.
// A launch then costs the payload a working directory and an exec. The init places the
// launch's fds for it (the two share the fd table, as a cold launch's vfork does), starts it,
// and learns that it exec'd the way a thread's join does: the kernel clears a word the two
// share and wakes the init (CLONE_CHILD_CLEARTID; exec releases the memory as exit does).
//
// Why it shares the init's memory (CLONE_VM): the launch's program, arguments and environment
// arrive in the init's memory after the payload started; shared, it reads them where they are.
// Shared memory is also why, once it has reported itself waiting, the payload makes raw system
// calls only: the init runs again then, and the C runtime's state (errno) is the init's.
//
// Whether a shape's payload may wait is the supervisor's decision (LaunchPlan.swift): only when
// the filter allows every call it makes after loading it besides the exec (`read` of
// XSB_WAITING_PAYLOAD_GO_FD, a record's `write` to XSB_WAITING_PAYLOAD_STATUS_FD, `exit_group`,
// and for a working directory other than "/" `chdir`), so that waiting never depends on what
// the policy lets the program do, and nothing it does is ever notified before the receiver reads.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"

/// The value of the record that says the payload waits (after the one naming its listener).
#define XSB_WAITING_RECORD (-1)

_Static_assert(sizeof(struct xsb_payload_status) == XSB_PAYLOAD_STATUS_RECORD_SIZE, "the record size the supervisor's check assumes");
_Static_assert(3 + XSB_MAX_EXTRA_FDS + 1 < XSB_WAITING_PAYLOAD_STATUS_FD, "the payload's fds (a script's too) stay below the waiting payload's");
_Static_assert(XSB_WAITING_PAYLOAD_STATUS_FD < XSB_WAITING_PAYLOAD_GO_FD && XSB_WAITING_PAYLOAD_GO_FD < XSB_FD_FLOOR,
               "the waiting payload's fds stay below the init's own");

/// What the payload works with: written by the init before it starts the payload, and
/// `program` before the go-ahead.
static struct {
    const struct xsb_spawn_config *cfg;
    int status_fd;  ///< write end of the status pipe (records: payload.c's)
    int program;    ///< the fd to exec the program by, or -1: by path
} payload;

/// What the init keeps between the build and the launch.
static struct {
    pid_t pid;
    int listener;
    int status_read;
    int go_write;
} init_side;

/// The payload's tid while it lives and has not exec'd; the kernel sets it at the clone and
/// clears it (and wakes a futex waiter) when the payload execs or exits.
static int32_t payload_tid;

/// The payload's stack (it shares the init's memory).
static unsigned char payload_stack[64 * 1024] __attribute__((aligned(64)));

// MARK: - Payload side

/// A status record (payload.c's format) with raw calls only.
static void record_raw(int step, int value, const char *detail) {
    struct xsb_payload_status s;
    unsigned char *p = (unsigned char *)&s;
    for (size_t i = 0; i < sizeof s; i++) p[i] = 0;
    s.step = step;
    s.value = value;
    xsb_copy_string(s.detail, sizeof s.detail, detail);
    long n;
    do {
        n = xsb_raw_syscall(SYS_write, payload.status_fd, (long)&s, sizeof s, 0, 0);
    } while (n == -EINTR);
}

__attribute__((noreturn)) static void fail_raw(int step, long error, const char *detail) {
    record_raw(step, (int)-error, detail);
    for (;;) xsb_raw_syscall(SYS_exit_group, 127, 0, 0, 0, 0);
}

static int waiting_payload_main(void *unused) {
    (void)unused;
    const struct xsb_spawn_config *cfg = payload.cfg;
    int status_fd = payload.status_fd;
    // payload.c's steps, in its order, without what is per launch (fds, terminal, directory).
    if (setsid() < 0) xsb_payload_fail(status_fd, XSB_STEP_SESSION, "setsid");
    xsb_payload_reset_signals(status_fd);                            // signals.c
    xsb_payload_apply_rlimits(cfg, status_fd);                       // rlimits.c
    xsb_payload_drop_capabilities(cfg, status_fd);                   // capabilities.c
    xsb_payload_set_no_new_privs(status_fd);                         // capabilities.c
    xsb_payload_deny_write_execute(cfg, status_fd);                  // seccomp.c
    // The listener lands at a low number: the init moves it above the launch's fds, and tells
    // the receiver thread, once we wait.
    int listener = xsb_payload_announce_listener(cfg, status_fd, -1);  // seccomp.c
    xsb_payload_unblock_signals(status_fd);                          // signals.c
    xsb_payload_load_filter(cfg, status_fd, listener);               // seccomp.c

    // From here on the filter applies, and the init runs again: raw calls only.
    record_raw(XSB_STEP_NONE, XSB_WAITING_RECORD, "waiting");
    char go = 0;
    long n;
    do {
        n = xsb_raw_syscall(SYS_read, XSB_WAITING_PAYLOAD_GO_FD, (long)&go, 1, 0, 0);
    } while (n == -EINTR);
    if (n != 1) fail_raw(XSB_STEP_SPAWN_PAYLOAD, n < 0 ? n : -EPIPE, "waiting for the launch");
    // Its working directory is the sandbox's root already (it was started after the pivot):
    // "/" needs no call, which a filter without `chdir` relies on (LaunchPlan.swift).
    if (!(cfg->cwd[0] == '/' && cfg->cwd[1] == '\0')) {
        n = xsb_raw_syscall(SYS_chdir, (long)cfg->cwd, 0, 0, 0, 0);
        if (n < 0) fail_raw(XSB_STEP_WORKING_DIRECTORY, n, cfg->cwd);
    }
    if (payload.program >= 0)
        n = xsb_raw_syscall(SYS_execveat, payload.program, (long)"", (long)cfg->argv, (long)cfg->envp, AT_EMPTY_PATH);
    else
        n = xsb_raw_syscall(SYS_execve, (long)cfg->path, (long)cfg->argv, (long)cfg->envp, 0, 0);
    fail_raw(XSB_STEP_EXEC, n, cfg->path);
}

// MARK: - Init side

/// Moves `fd` to exactly `target` (close-on-exec), closing the original; `target` must be free.
static int place_at(int fd, int target, int control_fd, const char *what) {
    if (fcntl(target, F_GETFD) >= 0) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, EBUSY, what);
    if (syscall(SYS_dup3, fd, target, O_CLOEXEC) < 0) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, what);
    close(fd);
    return target;
}

/// Whether the payload has ended or been stopped (from outside: nothing in the sandbox may
/// signal it), without reaping it: either way it will never exec.
static int payload_gone_or_stopped(void) {
    if (__atomic_load_n(&payload_tid, __ATOMIC_ACQUIRE) == 0) return 1;
    siginfo_t info;
    info.si_pid = 0;
    return waitid(P_PID, (id_t)init_side.pid, &info, WEXITED | WSTOPPED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
}

/// Takes the payload's records without blocking: 1 once it waits, 0 for nothing yet; a
/// failure it reports fails the build. Raw calls: the payload runs C runtime code in our memory now.
static int take_records(int control_fd, int status_read, int *listener) {
    for (;;) {
        struct xsb_payload_status record;
        long n = xsb_raw_syscall(SYS_read, status_read, (long)&record, sizeof record, 0, 0);
        if (n == -EAGAIN || n == -EINTR) return 0;
        if (n != (long)sizeof record) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, n < 0 ? (int)-n : EPROTO, "status pipe");
        if (record.step == XSB_STEP_NONE && record.value == XSB_WAITING_RECORD) return 1;
        if (record.step == XSB_STEP_NONE) {
            *listener = record.value;
            continue;
        }
        record.detail[sizeof record.detail - 1] = '\0';
        xsb_init_fail(control_fd, record.step, record.value, record.detail);
    }
}

/// Waits at build time until the payload waits; fails the build with the step it reports, or
/// when it ends without one. Returns its listener's fd number.
static int await_waiting(int control_fd, int status_read) {
    int listener = -1;
    while (!take_records(control_fd, status_read, &listener)) {
        // Ended (killed from outside) without a record: nothing will come. Its records, if
        // any, were written before its end and read above.
        if (__atomic_load_n(&payload_tid, __ATOMIC_ACQUIRE) == 0) {
            if (take_records(control_fd, status_read, &listener)) break;
            xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, ECHILD, "the waiting payload ended before it waited");
        }
        struct pollfd watch = {.fd = status_read, .events = POLLIN};
        struct timespec nap = {.tv_sec = 0, .tv_nsec = 5 * 1000 * 1000};  // to notice an end without a record
        (void)xsb_raw_syscall(SYS_ppoll, (long)&watch, 1, (long)&nap, 0, 8);
    }
    if (listener < 0) xsb_init_fail(control_fd, XSB_STEP_SECCOMP, EBADF, "the waiting payload named no listener");
    return listener;
}

int xsb_waiting_payload_start(struct xsb_spawn_config *cfg, int control_fd, struct xsb_receiver_pipes *pipes) {
    // What built the shape (cgroup `tasks` files, detached mounts) is done with, and the
    // control socket goes above every fd a launch will place (the payload shares our table).
    int only_control[1] = {control_fd};
    xsb_init_keep_only(control_fd, only_control, 1);                 // fds.c
    cfg->cgroup_tasks_fds[0] = cfg->cgroup_tasks_fds[1] = cfg->cgroup_tasks_fds[2] = cfg->cgroup_tasks_fds[3] = -1;
    cfg->mount_tree_count = 0;
    control_fd = xsb_init_lift_control_socket(cfg, control_fd);      // fds.c
    // The receiver thread first, as in a cold launch (the same pids: it, then the payload).
    xsb_receiver_launch(cfg, control_fd, pipes);                     // receiver.c

    int status[2], go[2];
    if (pipe2(status, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(go, O_CLOEXEC) != 0)
        xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "pipe2");
    status[0] = xsb_init_move_high(cfg, control_fd, status[0], "status pipe");
    status[1] = place_at(status[1], XSB_WAITING_PAYLOAD_STATUS_FD, control_fd, "status pipe");
    go[1] = xsb_init_move_high(cfg, control_fd, go[1], "go-ahead pipe");
    go[0] = place_at(go[0], XSB_WAITING_PAYLOAD_GO_FD, control_fd, "go-ahead pipe");

    payload.cfg = cfg;
    payload.status_fd = status[1];
    payload.program = -1;
    // Every signal stays blocked across the clone (the init's mask): the payload unblocks its
    // own right before its filter, as in payload.c.
    // The kernel writes its tid before it runs (CLONE_PARENT_SETTID) and clears it at its exec
    // or end (CLONE_CHILD_CLEARTID).
    int pid = clone(waiting_payload_main, payload_stack + sizeof payload_stack,
                    CLONE_VM | CLONE_FILES | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD, NULL, &payload_tid, NULL, &payload_tid);
    if (pid < 0) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "clone");
    init_side.pid = pid;
    int listener = await_waiting(control_fd, status[0]);
    listener = xsb_init_move_high(cfg, control_fd, listener, "seccomp listener");
    int32_t announcement = listener;
    if (write(pipes->announce[1], &announcement, sizeof announcement) != (ssize_t)sizeof announcement)
        xsb_init_fail(control_fd, XSB_STEP_SECCOMP, errno, "listener announcement");

    init_side.listener = listener;
    init_side.status_read = status[0];
    init_side.go_write = go[1];
    return control_fd;
}

size_t xsb_waiting_payload_fds(const struct xsb_receiver_pipes *pipes, int *fds) {
    size_t n = 0;
    fds[n++] = pipes->announce[0];
    fds[n++] = pipes->announce[1];
    fds[n++] = pipes->finished[0];
    fds[n++] = pipes->finished[1];
    fds[n++] = init_side.listener;
    fds[n++] = init_side.status_read;
    fds[n++] = payload.status_fd;
    fds[n++] = init_side.go_write;
    fds[n++] = XSB_WAITING_PAYLOAD_GO_FD;
    return n;
}

void xsb_waiting_payload_idle(int control_fd) {
    int exits = xsb_signals_child_exits();  // signals.c: SIGCHLD stays blocked and queues for it
    if (exits < 0) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "signalfd");
    for (;;) {
        struct pollfd watch[2] = {{.fd = control_fd, .events = POLLIN}, {.fd = exits, .events = POLLIN}};
        if (poll(watch, 2, -1) < 0) {
            if (errno == EINTR) continue;
            xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "poll");
        }
        if (watch[1].revents & POLLIN) xsb_signals_drain(exits);
        // Killed or stopped from outside while idle: this sandbox can run nothing any more. Its
        // end tells the supervisor's watch of idle sandboxes, which replaces it (a record the
        // payload wrote before it ended names why).
        if (payload_gone_or_stopped()) {
            int ignored = -1;
            (void)take_records(control_fd, init_side.status_read, &ignored);
            xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, ECHILD, "the waiting payload ended or stopped while idle");
        }
        if (watch[0].revents != 0) break;
    }
    close(exits);
}

pid_t xsb_waiting_payload_go(const struct xsb_spawn_config *cfg, int control_fd, int *listener) {
    // Killed or stopped from outside since the idle watch last looked: this sandbox fails its
    // launch (the supervisor then launches cold, as after any failure of a pre-built sandbox)
    // rather than report a program that never ran or wait for it for good.
    if (payload_gone_or_stopped())
        xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, ECHILD, "the waiting payload ended or stopped before its launch");
    payload.program = xsb_init_place_payload_fds(cfg, control_fd);   // fds.c
    char go = 1;
    ssize_t n;
    do {
        n = write(init_side.go_write, &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "go-ahead pipe");
    // Until it has exec'd or ended, as the vfork of a cold launch waits.
    for (int32_t tid; (tid = __atomic_load_n(&payload_tid, __ATOMIC_ACQUIRE)) != 0;)
        (void)syscall(SYS_futex, &payload_tid, FUTEX_WAIT, tid, NULL, NULL, 0);
    xsb_receiver_exec_done();                                        // receiver.c

    // Its records say whether it exec'd (none) or which step failed.
    struct xsb_payload_status record;
    while (read(init_side.status_read, &record, sizeof record) == (ssize_t)sizeof record) {
        if (record.step == XSB_STEP_NONE) continue;
        record.detail[sizeof record.detail - 1] = '\0';
        xsb_init_fail(control_fd, record.step, record.value, record.detail);
    }
    *listener = init_side.listener;
    return init_side.pid;
}
