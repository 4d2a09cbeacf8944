// signals.c's cases: dispositions and the mask the init and the payload inherit, reset.
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "forked_child.h"

static void caught(int sig) { (void)sig; }

/// Every signal to its default action, glibc's own two (32, 33) too, which its sigaction refuses:
/// a known start whatever the test process's threads set up.
static int all_default(void) {
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } dfl = {0};
    for (int sig = 1; sig <= 64; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP && syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask) != 0) return -1;
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
    }
    xsbt_status_fields(out);
    return 0;
}

int xsbt_signals(enum xsbt_signal_step step, struct xsbt_outcome *out) {
    return xsbt_run_forked(signal_body, NULL, &step, out);
}
