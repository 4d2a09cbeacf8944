// Signals in the sandbox's processes. The supervisor blocks every signal across its clone (so
// no Swift or NIO handler runs in a child that shares its memory: spawn.c); the init and the
// payload inherit that mask and the supervisor's ignored signals through exec, and reset them.
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "child.h"

void xsb_init_reset_signals(void) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) (void)sigaction(sig, &dfl, NULL);
    }
    sigset_t all;
    sigfillset(&all);
    (void)sigprocmask(SIG_SETMASK, &all, NULL);
}

void xsb_payload_reset_signals(int status_fd) {
    // Ignored signals stay ignored across exec (SwiftNIO ignores SIGPIPE): reset them all.
    struct sigaction dfl;
    char *p = (char *)&dfl;
    for (size_t i = 0; i < sizeof dfl; i++) p[i] = 0;
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        if (sigaction(sig, &dfl, NULL) != 0 && errno != EINVAL) xsb_payload_fail(status_fd, XSB_STEP_SIGNALS, "sigaction");
    }
}

void xsb_payload_unblock_signals(int status_fd) {
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) xsb_payload_fail(status_fd, XSB_STEP_SIGNALS, "sigprocmask");
}
