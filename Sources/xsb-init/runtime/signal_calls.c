// Signal sets, masks and actions. glibc's sigset_t has room for 1024 signals; the kernel's is
// 8 bytes (64 signals), the first 8 bytes of glibc's, and every call below passes that size.
// The kernel's struct sigaction is not glibc's either (handler, flags, restorer, mask), and
// on x86_64 a handler returns through the restorer, which must call rt_sigreturn: the init
// installs a real SIGUSR1 handler (the receiver thread's wake-up).
//
// Unlike glibc, nothing here keeps signals 32 and 33 unblocked or refuses to act on them:
// they are glibc's own (thread cancellation and set*id broadcasts), and there is no glibc here.
#define _GNU_SOURCE
#include "runtime.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>

/// The kernel's signal set size.
#define KERNEL_SIGSET_SIZE 8

int sigemptyset(sigset_t *set) {
    memset(set, 0, sizeof *set);
    return 0;
}

int sigfillset(sigset_t *set) {
    memset(set, 0xff, sizeof *set);
    return 0;
}

int sigaddset(sigset_t *set, int sig) {
    if (sig <= 0 || sig > 64) {
        errno = EINVAL;
        return -1;
    }
    unsigned long *words = (unsigned long *)set;
    words[(sig - 1) / (8 * sizeof *words)] |= 1UL << ((sig - 1) % (8 * sizeof *words));
    return 0;
}

int sigprocmask(int how, const sigset_t *restrict set, sigset_t *restrict old) {
    return (int)xsb_rt_result(xsb_inline_syscall6(SYS_rt_sigprocmask, how, (long)set, (long)old, KERNEL_SIGSET_SIZE, 0, 0));
}

int pthread_sigmask(int how, const sigset_t *restrict set, sigset_t *restrict old) {
    // The error number itself, not -1 and errno.
    long ret = xsb_inline_syscall6(SYS_rt_sigprocmask, how, (long)set, (long)old, KERNEL_SIGSET_SIZE, 0, 0);
    return ret < 0 ? (int)-ret : 0;
}

int signalfd(int fd, const sigset_t *mask, int flags) {
    return (int)xsb_rt_result(xsb_inline_syscall6(SYS_signalfd4, fd, (long)mask, KERNEL_SIGSET_SIZE, flags, 0, 0));
}


#if defined(__x86_64__)
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif
/// Where a handler returns to: rt_sigreturn, which restores what the signal interrupted.
void xsb_rt_restore(void);
__asm__(".text\n"
        ".globl xsb_rt_restore\n"
        ".type xsb_rt_restore, @function\n"
        "xsb_rt_restore:\n"
        "    mov $" XSB_RT_STRINGIFY(SYS_rt_sigreturn) ", %rax\n"
        "    syscall\n"
        ".size xsb_rt_restore, . - xsb_rt_restore\n");
#endif

int sigaction(int sig, const struct sigaction *restrict action, struct sigaction *restrict old) {
    struct xsb_kernel_sigaction new_k, old_k;
    if (action != NULL) {
        memset(&new_k, 0, sizeof new_k);
        new_k.handler = (void *)action->sa_handler;
        new_k.flags = (unsigned long)action->sa_flags;
        memcpy(&new_k.mask, &action->sa_mask, sizeof new_k.mask);
#if defined(__x86_64__)
        // x86_64 has no signal trampoline of the kernel's: the restorer is ours.
        new_k.flags |= SA_RESTORER;
        new_k.restorer = (void *)xsb_rt_restore;
#endif
    }
    long ret = xsb_inline_syscall6(SYS_rt_sigaction, sig, action != NULL ? (long)&new_k : 0, old != NULL ? (long)&old_k : 0,
                              KERNEL_SIGSET_SIZE, 0, 0);
    if (ret < 0) return (int)xsb_rt_result(ret);
    if (old != NULL) {
        memset(old, 0, sizeof *old);
        old->sa_handler = (__sighandler_t)old_k.handler;
        old->sa_flags = (int)old_k.flags;
        old->sa_restorer = (void (*)(void))old_k.restorer;
        memcpy(&old->sa_mask, &old_k.mask, sizeof old_k.mask);
    }
    return 0;
}
