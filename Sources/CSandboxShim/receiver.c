// The sandbox init's notification receiver: one thread of the init that reads the payload's
// seccomp user notifications (every kill action, "no exec after start" and audit mode) and
// answers them from inside the sandbox.
//
// Why a blocked SECCOMP_IOCTL_NOTIF_RECV, and why here: the kernel counts every notification
// (notif->requests) and RECV takes one count per call. A notification whose task is
// interrupted by a signal before anyone received it is withdrawn (the call returns EINTR or
// restarts) but its count stays, so a RECV still wakes for it and returns ENOENT: "a call the
// filter stops was attempted", even when its number is gone. poll/epoll only look at the
// queue, so a supervisor watching the listener with epoll missed withdrawn calls and the
// program lived on. The receiver runs in the init (PID 1 inside, not under the filter), so
// there is no host thread and no fd passing in the way, and on a kill the init simply exits,
// which ends the PID namespace.
//
// The thread shares the init's memory, fd table and signal handlers, and so the init's one
// errno (the init's C runtime, Sources/xsb-init/runtime, has no TLS), so it must not call
// anything that touches errno or other C runtime state: every system call below is an inline
// `syscall` instruction.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "child.h"

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

/// What the receiver works with; written by the init's main thread before the thread starts.
static struct {
    int control_fd;
    int announce_fd;   ///< read end: the payload writes its listener's fd number here
    int finished_fd;   ///< write end: one byte when no task can use the filter any more
    int audit;
    int supervise_first_exec;
    int exec_done;     ///< set by the main thread once the payload's vfork returned
} receiver;

/// The thread's stack.
static unsigned char receiver_stack[64 * 1024] __attribute__((aligned(64)));

static void zero(void *p, size_t n) {
    volatile unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = 0;
}

static void send_message(uint32_t type, int32_t step, int32_t value, const char *detail, int flags) {
    struct xsb_msg msg;
    zero(&msg, sizeof msg);
    msg.type = type;
    msg.step = step;
    msg.value = value;
    xsb_copy_string(msg.detail, sizeof msg.detail, detail);
    long n;
    do {
        n = xsb_raw_syscall(SYS_sendto, receiver.control_fd, (long)&msg, sizeof msg, MSG_NOSIGNAL | flags, 0);
    } while (n == -EINTR);
}

/// Stops the sandbox dead before anything is reported: SIGKILL to every other process of the
/// PID namespace. The init's exit alone is not enough, and neither is the supervisor's SIGKILL
/// of the init once it has read our report: the init's exit closes the listener before the
/// kernel kills the namespace, and closing it answers a waiting call with ENOSYS, so the
/// program would run on for a moment (long enough to reply on a connection). With SIGKILL
/// already pending, no task returns to its program: the stopped call never runs.
static void kill_sandbox(void) { xsb_signals_kill_sandbox(); }  // signals.c

/// Ends the sandbox (after kill_sandbox and the report): the init's exit ends the namespace.
__attribute__((noreturn)) static void end_sandbox(void) {
    for (;;) xsb_raw_syscall(SYS_exit_group, 128 + 31, 0, 0, 0, 0);
}

/// Whether the launch's own execve was let run ("no exec after start").
static int first_exec_done;

/// What xsb_seccomp_decide decides on: the launch's settings and where the launch is.
static struct xsb_notification_state notification_state(void) {
    struct xsb_notification_state state = {
        .audit = receiver.audit,
        .supervise_first_exec = receiver.supervise_first_exec,
        .first_exec_done = first_exec_done,
        .exec_done = __atomic_load_n(&receiver.exec_done, __ATOMIC_ACQUIRE),
    };
    return state;
}

/// A call the policy kills: report it (by number, or XSB_UNNAMED_VIOLATION) and end the
/// sandbox. MSG_DONTWAIT: ending the sandbox must not wait for a supervisor that stopped
/// reading; only the name would be lost.
__attribute__((noreturn)) static void violation(int nr) {
    kill_sandbox();
    send_message(XSB_MSG_VIOLATION, 0, nr, "", MSG_DONTWAIT);
    end_sandbox();
}

/// The launch's own execve, which the policy forbids: fail the launch at once, and say why.
__attribute__((noreturn)) static void refuse_launch_exec(void) {
    kill_sandbox();
    send_message(XSB_MSG_ERROR, XSB_STEP_EXEC, EPERM, "the policy's seccomp filter denies execve", MSG_DONTWAIT);
    end_sandbox();
}

/// Fail closed: the listener cannot be read, so the filter cannot be enforced as written.
__attribute__((noreturn)) static void broken(int err, const char *what) {
    kill_sandbox();
    send_message(XSB_MSG_ERROR, XSB_STEP_SECCOMP, err, what, MSG_DONTWAIT);
    end_sandbox();
}

static void let_run(int listener, uint64_t id, int *answered) {
    struct seccomp_notif_resp resp;
    zero(&resp, sizeof resp);
    resp.id = id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    long r = xsb_raw_syscall(SYS_ioctl, listener, (long)SECCOMP_IOCTL_NOTIF_SEND, (long)&resp, 0, 0);
    // ENOENT: the task was killed meanwhile (or, without WAIT_KILLABLE_RECV, a signal
    // withdrew the call: it restarts and is notified again).
    if (answered) *answered = (r == 0);
}

/// Audit mode reports each syscall number once: the numbers of the syscall table by a bitmap,
/// and at most XSB_AUDITED_OTHERS_MAX other numbers (no syscall has them; each returns ENOSYS).
/// Without that bound a program calling syscall(n) for ever new n sent the supervisor a report
/// per call, and the supervisor's set of audited names grew without limit.
static unsigned char audited_bits[1024 / 8];
#define XSB_AUDITED_OTHERS_MAX 64
static int32_t audited_others[XSB_AUDITED_OTHERS_MAX];
static int audited_other_count;

/// Whether `nr` is reported now (the first time, and only while there is room for it).
static int audit_first_time(int nr) {
    if (nr >= 0 && nr < 1024) {
        if (audited_bits[nr / 8] & (1u << (nr % 8))) return 0;
        audited_bits[nr / 8] |= (unsigned char)(1u << (nr % 8));
        return 1;
    }
    for (int i = 0; i < audited_other_count; i++) {
        if (audited_others[i] == nr) return 0;
    }
    if (audited_other_count == XSB_AUDITED_OTHERS_MAX) return 0;
    audited_others[audited_other_count++] = nr;
    return 1;
}

/// Carries out xsb_seccomp_decide's verdict on one notified call.
static void handle(int listener, const struct seccomp_notif *req) {
    int nr = req->data.nr;
    struct xsb_notification_state state = notification_state();
    switch (xsb_seccomp_decide(nr, 0, &state)) {
    case XSB_VERDICT_LET_FIRST_EXEC_RUN:
        let_run(listener, req->id, &first_exec_done);
        return;
    case XSB_VERDICT_LET_RUN_AUDITED:
        // Blocking: the audited call waits until the supervisor has room for the report.
        if (audit_first_time(nr)) send_message(XSB_MSG_AUDITED, 0, nr, "", 0);
        let_run(listener, req->id, NULL);
        return;
    case XSB_VERDICT_FAIL_LAUNCH_EXEC:
        refuse_launch_exec();
    case XSB_VERDICT_END_SANDBOX:
    case XSB_VERDICT_IGNORE:  // never for a call read from the listener: fail closed
    default:
        violation(nr);
    }
}

/// Polls the listener once (`timeout_ns` < 0: no wait). Returns its revents.
static short poll_listener(int listener, long timeout_ns) {
    struct pollfd p = {.fd = listener, .events = POLLIN};
    struct timespec ts = {.tv_sec = 0, .tv_nsec = timeout_ns < 0 ? 0 : timeout_ns};
    long n = xsb_raw_syscall(SYS_ppoll, (long)&p, 1, (long)&ts, 0, 8);
    return n > 0 ? p.revents : 0;
}

/// ENOENT from RECV while tasks still use the filter: a notification was withdrawn before
/// we read it (a signal interrupted the call). The call was attempted; in kill mode the
/// sandbox ends. A call restarted at once (SA_RESTART, or SIGSTOP/SIGCONT) is notified again:
/// wait a moment for that one, to name it.
__attribute__((noreturn)) static void withdrawn(int listener) {
    if (poll_listener(listener, 1000000) & POLLIN) {
        struct seccomp_notif req;
        zero(&req, sizeof req);
        // A queued notification holds a count: this RECV does not block.
        if (xsb_raw_syscall(SYS_ioctl, listener, (long)SECCOMP_IOCTL_NOTIF_RECV, (long)&req, 0, 0) == 0) handle(listener, &req);
    }
    violation(XSB_UNNAMED_VIOLATION);
}

static int receiver_tid;

static int receiver_main(void *unused) {
    (void)unused;
    // The one signal this thread takes: xsb_receiver_wake's.
    xsb_signals_accept_wake();  // signals.c
    xsb_raw_syscall(SYS_prctl, PR_SET_NAME, (long)"xsb-notify", 0, 0, 0);
    xsb_raw_syscall(SYS_prctl, PR_SET_TIMERSLACK, 1000, 0, 0, 0);  // its naps below are short

    // The payload announces the listener's number right before loading its filter.
    int32_t listener = -1;
    long n = xsb_raw_syscall(SYS_read, receiver.announce_fd, (long)&listener, sizeof listener, 0, 0);
    if (n == (long)sizeof listener && listener >= 0) {
        // The fd appears in the shared fd table microseconds later (or never, when loading
        // failed: then the payload's vfork returns and exec_done is set).
        for (int round = 0;; round++) {
            int done = __atomic_load_n(&receiver.exec_done, __ATOMIC_ACQUIRE);
            if (!(poll_listener(listener, -1) & POLLNVAL)) break;
            if (done) {  // it was not there even after the vfork returned: it never will be
                listener = -1;
                break;
            }
            if (round < 200) {
                xsb_raw_syscall(SYS_sched_yield, 0, 0, 0, 0, 0);
            } else {
                struct timespec nap = {.tv_sec = 0, .tv_nsec = 20000};
                xsb_raw_syscall(SYS_nanosleep, (long)&nap, 0, 0, 0, 0);
            }
        }
    } else {
        listener = -1;
    }

    if (listener >= 0) {
        // Wake this thread on the notifying task's CPU (Linux 6.6; optional): it runs at once,
        // which leaves a signal less time to withdraw the call before it is read.
        uint64_t flags = SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP;
        xsb_raw_syscall(SYS_ioctl, listener, (long)SECCOMP_IOCTL_NOTIF_SET_FLAGS, (long)flags, 0, 0);
        for (;;) {
            struct seccomp_notif req;
            zero(&req, sizeof req);
            long r = xsb_raw_syscall(SYS_ioctl, listener, (long)SECCOMP_IOCTL_NOTIF_RECV, (long)&req, 0, 0);
            if (r == 0) {
                handle(listener, &req);
                continue;
            }
            if (r == -EINTR) {
                // The main thread's wake-up (xsb_receiver_wake). RECV returns EINTR only when
                // no notification is pending, so with no user of the filter left we are done.
                if (poll_listener(listener, -1) & POLLHUP) break;
                continue;
            }
            if (r != -ENOENT) broken((int)-r, "reading the seccomp listener");
            // No task uses the filter any more (the kernel answers RECV with ENOENT from then
            // on): the program and everything it started have exited.
            if (poll_listener(listener, -1) & POLLHUP) break;
            struct xsb_notification_state state = notification_state();
            if (xsb_seccomp_decide(XSB_UNNAMED_VIOLATION, 1, &state) != XSB_VERDICT_IGNORE) withdrawn(listener);
        }
    }
    // Tell the init's main thread that nothing more can come from the filter.
    char one = 1;
    xsb_raw_syscall(SYS_write, receiver.finished_fd, (long)&one, 1, 0, 0);
    return 0;  // clone ends just this thread (exit, not exit_group)
}

static int receiver_start(const struct xsb_spawn_config *cfg, int control_fd, int announce_fd, int finished_fd) {
    receiver.control_fd = control_fd;
    receiver.announce_fd = announce_fd;
    receiver.finished_fd = finished_fd;
    receiver.audit = cfg->audit;
    receiver.supervise_first_exec = cfg->supervise_first_exec;
    __atomic_store_n(&receiver.exec_done, 0, __ATOMIC_RELEASE);
    // SIGUSR1 interrupts a blocked RECV. Only the receiver unblocks it.
    if (xsb_signals_install_wake() != 0) return -1;  // signals.c
    // A thread the C runtime does not know (hence the raw syscalls), on a static stack.
    // It inherits the main thread's signal mask (every signal blocked).
    receiver_tid = clone(receiver_main, receiver_stack + sizeof receiver_stack,
                         CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM, NULL);
    return receiver_tid > 0 ? 0 : -1;
}

void xsb_receiver_launch(const struct xsb_spawn_config *cfg, int control_fd, struct xsb_receiver_pipes *pipes) {
    if (pipe2(pipes->announce, O_CLOEXEC) != 0 || pipe2(pipes->finished, O_CLOEXEC | O_NONBLOCK) != 0)
        xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "pipe2");
    for (int i = 0; i < 2; i++) {
        pipes->announce[i] = xsb_init_move_high(cfg, control_fd, pipes->announce[i], "receiver pipe");
        pipes->finished[i] = xsb_init_move_high(cfg, control_fd, pipes->finished[i], "receiver pipe");
    }
    if (receiver_start(cfg, control_fd, pipes->announce[0], pipes->finished[1]) != 0)
        xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "seccomp notification receiver thread");
}

void xsb_receiver_exec_done(void) { __atomic_store_n(&receiver.exec_done, 1, __ATOMIC_RELEASE); }

void xsb_receiver_wake(void) {
    xsb_signals_wake(receiver_tid);  // signals.c
}
