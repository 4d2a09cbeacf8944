// Signals in the sandbox's processes. The supervisor blocks every signal across its clone (so
// no Swift or NIO handler runs in a child that shares its memory: spawn.c); the init and the
// payload inherit that mask and the supervisor's ignored signals through exec, and reset them.
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

/// `sig` back to its default action through the kernel's own call: glibc's `sigaction` refuses
/// its two internal signals (32 and 33), and one a host ignores would otherwise stay ignored in
/// the sandbox. All zeros is SIG_DFL, no flags and an empty mask, whatever the architecture's
/// layout of the kernel's struct.
static int default_action(int sig) {
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } dfl = {0};
    return (int)syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
}

void xsb_init_reset_signals(void) {
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) (void)default_action(sig);
    }
    sigset_t all;
    sigfillset(&all);
    (void)sigprocmask(SIG_SETMASK, &all, NULL);
}

void xsb_payload_reset_signals(int status_fd) {
    // Ignored signals stay ignored across exec (SwiftNIO ignores SIGPIPE): reset them all.
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        if (default_action(sig) != 0) xsb_payload_fail(status_fd, XSB_STEP_SIGNALS, "rt_sigaction");
    }
}

void xsb_payload_unblock_signals(int status_fd) {
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) xsb_payload_fail(status_fd, XSB_STEP_SIGNALS, "sigprocmask");
}
