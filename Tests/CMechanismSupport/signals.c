// signals.c's cases: dispositions and the mask the init and the payload inherit, reset; the
// supervisor's mask across its clone; and the init's signals to the sandbox, in a PID
// namespace of the case's own.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "forked_child.h"

static void caught(int sig) { (void)sig; }

/// Every signal to its default action, glibc's own two (32, 33) too, which its sigaction refuses:
/// a known start whatever the test process's threads set up.
static int set_action(int sig, void *handler) {
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } action = {handler, 0, NULL, 0};
    return (int)syscall(SYS_rt_sigaction, sig, &action, NULL, sizeof action.mask);
}

static int all_default(void) {
    for (int sig = 1; sig <= 64; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP && set_action(sig, SIG_DFL) != 0) return -1;
    }
    return 0;
}

static int signal_body(const void *context, struct xsbt_outcome *out) {
    enum xsbt_signal_step step = *(const enum xsbt_signal_step *)context;
    if (all_default() != 0) return -1;
    // What a host leaves its children: ignored signals (SwiftNIO's SIGPIPE), a handler, a mask.
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &action, NULL) != 0 || sigaction(SIGTERM, &action, NULL) != 0) return -1;
    // glibc's own two, which its sigaction refuses to set: a host can still have them ignored.
    if (set_action(32, SIG_IGN) != 0 || set_action(33, SIG_IGN) != 0) return -1;
    action.sa_handler = caught;
    if (sigaction(SIGUSR1, &action, NULL) != 0) return -1;
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGUSR2);
    if (sigprocmask(SIG_SETMASK, &mask, NULL) != 0) return -1;

    switch (step) {
    case XSBT_NOTHING:
        break;
    case XSBT_INIT_RESET:
        xsb_init_reset_signals();
        break;
    case XSBT_PAYLOAD_RESET:
        xsb_payload_reset_signals(XSBT_FAIL_FD);
        break;
    case XSBT_PAYLOAD_RESET_UNBLOCK:
        xsb_payload_reset_signals(XSBT_FAIL_FD);
        xsb_payload_unblock_signals(XSBT_FAIL_FD);
        break;
    case XSBT_SUPERVISOR_BLOCK: {
        sigset_t saved;
        xsb_signals_block_all(&saved);
        break;
    }
    case XSBT_SUPERVISOR_BLOCK_RESTORE: {
        sigset_t saved;
        xsb_signals_block_all(&saved);
        xsb_signals_restore(&saved);
        break;
    }
    }
    xsbt_status_fields(out);
    return 0;
}

int xsbt_signals(enum xsbt_signal_step step, struct xsbt_outcome *out) {
    return xsbt_run_forked(signal_body, NULL, &step, out);
}

// MARK: - The init's signals to the sandbox

/// The state letter of process `pid` ("pid (comm) S …"), '?' when it cannot be read.
static char state_of(pid_t pid) {
    char path[64] = "/proc/", stat[256];
    xsbt_append_number(path, sizeof path, pid);
    xsbt_append(path, sizeof path, "/stat");
    if (xsbt_read_text(path, stat, sizeof stat) != 0) return '?';
    char state = '?';
    for (size_t i = 0; stat[i] != '\0' && stat[i + 1] != '\0' && stat[i + 2] != '\0'; i++) {
        if (stat[i] == ')' && stat[i + 1] == ' ') state = stat[i + 2];
    }
    return state;
}

/// Appends "NAME RESULT" and the state letters of `count` processes, one line.
static void line(struct xsbt_outcome *out, const char *name, long result, const pid_t *pids, int count) {
    xsbt_append(out->text, sizeof out->text, name);
    xsbt_append(out->text, sizeof out->text, " ");
    xsbt_append_number(out->text, sizeof out->text, result);
    if (count > 0) xsbt_append(out->text, sizeof out->text, " ");
    for (int i = 0; i < count; i++) {
        char letter[2] = {state_of(pids[i]), '\0'};
        xsbt_append(out->text, sizeof out->text, letter);
    }
    xsbt_append(out->text, sizeof out->text, "\n");
}

/// Sleeps until every process of `pids` waits in pause() again (at most a second): continued,
/// one may be runnable for a moment before it is back there.
static void await_waiting(const pid_t *pids, int count) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    for (int round = 0; round < 1000; round++) {
        int waiting = 1;
        for (int i = 0; i < count; i++) waiting &= state_of(pids[i]) == 'S';
        if (waiting) return;
        nanosleep(&pause, NULL);
    }
}

/// A process that tells `ready` its pid and waits for signals.
__attribute__((noreturn)) static void wait_for_signals(int ready) {
    int32_t pid = (int32_t)getpid();
    (void)write(ready, &pid, sizeof pid);
    for (;;) pause();
}

/// The terminating signal of the child `pid` once it ends; -1 when it ended otherwise, or
/// has not ended within two seconds (a signal that missed it: the case must not hang).
static long ended_by(pid_t pid) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
    for (int round = 0; round < 2000; round++) {
        int status = 0;
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
        if (got < 0 && errno != EINTR) return -1;
        nanosleep(&pause, NULL);
    }
    return -1;
}

/// PID 1 of the case's namespace, as the init is: a payload (a session leader with a child
/// of its own) and another process, then each of signals.c's signals to the sandbox.
static int sandbox_init(struct xsbt_outcome *out) {
    // kill(-1) must never leave a namespace of the case's own.
    if (getpid() != 1) return 2;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 || mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        return 3;
    sigset_t none;
    sigemptyset(&none);
    if (all_default() != 0 || sigprocmask(SIG_SETMASK, &none, NULL) != 0) return 4;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return 5;
    pid_t leader = fork();
    if (leader == 0) {
        if (setsid() < 0) _exit(1);
        if (fork() == 0) wait_for_signals(ready[1]);
        wait_for_signals(ready[1]);
    }
    pid_t other = fork();
    if (other == 0) wait_for_signals(ready[1]);
    if (leader < 0 || other < 0) return 6;
    pid_t member = -1;
    for (int i = 0; i < 3; i++) {
        int32_t pid;
        if (read(ready[0], &pid, sizeof pid) != (ssize_t)sizeof pid) return 7;
        if (pid != leader && pid != other) member = pid;
    }
    // As in the init: SIGCHLD blocked, read from the signalfd.
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) != 0) return 8;
    int exits = xsb_signals_child_exits();
    if (exits < 0) return 9;

    pid_t all[3] = {leader, member, other};
    line(out, "stop", xsb_signals_stop_sandbox(), all, 3);
    line(out, "continue", xsb_signals_continue_sandbox(), NULL, 0);
    await_waiting(all, 3);
    line(out, "continued", 0, all, 3);
    line(out, "signal 0", xsb_signals_to_payload(leader, 0), NULL, 0);
    line(out, "signal 65", xsb_signals_to_payload(leader, 65), all, 3);
    line(out, "SIGTERM to the payload", xsb_signals_to_payload(leader, SIGTERM), NULL, 0);
    line(out, "payload ended by", ended_by(leader), NULL, 0);
    // Its child is ours now (the namespace's reaper's), as in the sandbox.
    line(out, "its child ended by", ended_by(member), &other, 1);
    struct pollfd p = {.fd = exits, .events = POLLIN};
    line(out, "child exits readable", poll(&p, 1, 0), NULL, 0);
    xsb_signals_drain(exits);
    line(out, "after draining", poll(&p, 1, 0), NULL, 0);
    xsb_signals_kill_sandbox();
    line(out, "the other ended by", ended_by(other), NULL, 0);
    return 0;
}

static int sandbox_body(const void *context, struct xsbt_outcome *out) {
    (void)context;
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) return -errno;
    pid_t init = fork();
    if (init == 0) _exit(sandbox_init(out));
    if (init < 0) return -errno;
    int status = 0;
    while (waitpid(init, &status, 0) < 0 && errno == EINTR) {}
    return status;
}

int xsbt_signal_sandbox(struct xsbt_outcome *out) {
    return xsbt_run_forked(sandbox_body, NULL, NULL, out);
}
