// Lifetime and exit, both sides: the supervisor holds the init by a pidfd (reap; the signals
// are signals.c's); the init is bound to the supervisor (the parent-death signal, signals.c,
// and the control socket's hang-up) and, as PID 1 of the sandbox, reaps every process in it
// and reports the payload's exit. When the init
// exits, the kernel kills every other process of the namespace, so "the init is gone" always
// means "the sandbox is gone".
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

// MARK: - Supervisor side: pidfds

int xsb_pidfd_wait(int pidfd) {
    siginfo_t info;
    while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED) != 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

int xsb_pidfd_reap(int pidfd, int *wait_status) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED | WNOHANG) != 0) return -errno;
    if (info.si_pid == 0) return 0;
    // Rebuild the classic wait status so callers can use WIFEXITED & co.
    if (info.si_code == CLD_EXITED) *wait_status = (info.si_status & 0xff) << 8;
    else *wait_status = (info.si_status & 0x7f) | (info.si_code == CLD_DUMPED ? 0x80 : 0);
    return 1;
}

// MARK: - Init side

static int64_t monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/// The supervisor is gone: take the sandbox down with it. SIGKILL first: our exit closes the
/// seccomp listener, which would answer a waiting call with ENOSYS and let it run on.
__attribute__((noreturn)) static void supervisor_gone(void) {
    xsb_signals_kill_sandbox();  // signals.c
    _exit(1);
}

void xsb_init_serve(int control_fd, pid_t payload, int finished_fd, int listener) {
    int sfd = xsb_signals_child_exits();  // signals.c
    if (sfd < 0) _exit(127);

    struct pollfd fds[4] = {
        {.fd = control_fd, .events = POLLIN},
        {.fd = sfd, .events = POLLIN},
        // Once the payload has ended: the receiver's word that it has finished. It usually comes
        // first, early in the payload's exit; watched before, it would wake us for nothing
        // while the exit still runs.
        {.fd = -1, .events = POLLIN},
        // Once the payload has ended: the filter's last user gone (a hang-up).
        {.fd = -1, .events = 0},
    };
    int receiver_finished = 0, payload_ended = 0, payload_status = 0, filter_unused = 0;
    int64_t deadline = 0;
    for (;;) {
        int timeout = -1;
        if (payload_ended) {
            int64_t now = monotonic_ms();
            if (receiver_finished || now >= deadline) {
                xsb_control_send_exit(control_fd, payload_status);  // control.c
                // Our exit ends the namespace.
                _exit(0);
            }
            timeout = (int)(deadline - now);
            if (filter_unused) {
                // Before Linux 6.11 the receiver's RECV does not return when the filter loses
                // its last user: interrupt it, and again each millisecond (it may have been
                // busy, not yet blocked, when the signal came).
                xsb_receiver_wake();
                timeout = 1;
            }
        }
        if (poll(fds, 4, timeout) < 0) {
            if (errno == EINTR) continue;
            _exit(127);
        }
        if (fds[2].revents & POLLIN) {
            // Never drained: polled again it would make this loop spin.
            receiver_finished = 1;
            fds[2].fd = -1;
        }
        if (fds[3].revents & POLLHUP) {
            filter_unused = 1;
            fds[3].fd = -1;
        }
        if (fds[1].revents & POLLIN) {
            xsb_signals_drain(sfd);  // signals.c
            int status, payload_reaped = 0;
            pid_t p;
            while ((p = waitpid(-1, &status, WNOHANG | __WALL)) > 0) {
                if (p == payload && !payload_ended) {
                    payload_ended = payload_reaped = 1;
                    payload_status = status;
                    deadline = monotonic_ms() + 1000;
                    if (!receiver_finished) fds[2].fd = finished_fd;
                    fds[3].fd = listener;
                }
            }
            // The sandbox ends with its program. Kill what it left now, so that the filter's
            // last user goes and the receiver can finish; wait at most 1 s. No child left
            // (ECHILD) is no process left: each process of the namespace is our descendant or
            // was reparented to us. Then the kill, which visits every process on the machine,
            // has nothing to do.
            if (payload_reaped && !(p < 0 && errno == ECHILD)) xsb_signals_kill_sandbox();  // signals.c
        }
        if (fds[0].revents & POLLIN) {
            if (xsb_control_serve_request(control_fd, payload) != 0) supervisor_gone();
        } else if (fds[0].revents & (POLLHUP | POLLERR)) {
            supervisor_gone();
        }
    }
}
