#ifndef XSB_CSECCOMP_SHIM_H
#define XSB_CSECCOMP_SHIM_H
#include <seccomp.h>
#include <errno.h>

// libseccomp's action constructors are macros, which Swift does not import.
static inline uint32_t xsb_scmp_act_errno(uint16_t err) { return SCMP_ACT_ERRNO(err); }
static inline uint32_t xsb_scmp_act_kill_process(void) { return SCMP_ACT_KILL_PROCESS; }
static inline uint32_t xsb_scmp_act_allow(void) { return SCMP_ACT_ALLOW; }
static inline uint32_t xsb_scmp_act_notify(void) { return SCMP_ACT_NOTIFY; }
static inline uint32_t xsb_scmp_act_log(void) { return SCMP_ACT_LOG; }
static inline uint32_t xsb_scmp_arch_native(void) { return SCMP_ARCH_NATIVE; }

// ---- Added for SandboxPolicy (compiler export and tests) ----
#include <stddef.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

// memfd_create(2) through syscall(2), which is variadic and does not import.
static inline int xsb_memfd_create(const char *name, unsigned int flags) {
    return (int)syscall(SYS_memfd_create, name, flags);
}

// A raw system call with six arguments (syscall(2) is variadic). Returns -1 and sets errno on failure.
static inline long xsb_raw_syscall6(long nr, unsigned long a0, unsigned long a1, unsigned long a2,
                                    unsigned long a3, unsigned long a4, unsigned long a5) {
    return syscall(nr, a0, a1, a2, a3, a4, a5);
}

// Sets no_new_privs and installs a ready BPF program (an array of struct sock_filter) into the
// calling thread with prctl(PR_SET_SECCOMP). For tests and tools; returns 0 or -1 with errno.
static inline int xsb_install_seccomp_program(const void *program, size_t byteCount) {
    if (byteCount == 0 || byteCount % sizeof(struct sock_filter) != 0 ||
        byteCount / sizeof(struct sock_filter) > 0xffff) { errno = EINVAL; return -1; }
    struct sock_fprog prog = {
        .len = (unsigned short)(byteCount / sizeof(struct sock_filter)),
        .filter = (struct sock_filter *)program,
    };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

#endif
