// The init's own C runtime (this directory): what glibc gave the init, without glibc's start-up.
// xsb-init is linked with -nostdlib (Package.swift says why), so every function the linked
// objects call is defined here, with glibc's prototypes and ABI (the sources keep including
// glibc's headers: types and constants stay glibc's).
#ifndef XSB_INIT_RUNTIME_H
#define XSB_INIT_RUNTIME_H

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "the init's runtime (Sources/xsb-init/runtime) needs porting to this architecture"
#endif

// The shim's internal header, for its raw system call (xsb_inline_syscall6): this runtime exists
// for the shim's objects.
#include "../../CSandboxShim/child.h"

#include <sys/syscall.h>

#define XSB_RT_STRING(x) #x
/// A macro's value as a string literal (a system call number in assembly).
#define XSB_RT_STRINGIFY(x) XSB_RT_STRING(x)

/// glibc's convention for a kernel result: -1 with errno set for -4095…-1, the value otherwise.
long xsb_rt_result(long ret);

/// Ends the process with `status` (exit_group, with nothing run first).
__attribute__((noreturn)) static inline void xsb_rt_exit_group(int status) {
    for (;;) xsb_inline_syscall6(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

/// A function of glibc's that only the supervisor calls (the shim's objects are linked whole):
/// reached in the init, it is a bug, so the init ends at once with 127.
__attribute__((noreturn)) void xsb_rt_supervisor_only(void);

#endif
