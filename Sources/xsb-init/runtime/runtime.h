// The init's own C runtime (this directory): what glibc gave the init, without glibc's start-up.
// xsb-init is linked with -nostdlib (Package.swift says why), so every function the linked
// objects call is defined here, with glibc's prototypes and ABI (the sources keep including
// glibc's headers: types and constants stay glibc's).
#ifndef XSB_INIT_RUNTIME_H
#define XSB_INIT_RUNTIME_H

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "the init's runtime (Sources/xsb-init/runtime) needs porting to this architecture"
#endif

#define XSB_RT_STRING(x) #x
/// A macro's value as a string literal (a system call number in assembly).
#define XSB_RT_STRINGIFY(x) XSB_RT_STRING(x)

/// One system call with up to six arguments; returns the kernel's result (-errno on failure).
static inline long xsb_rt_syscall(long nr, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#else
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
#endif
}

/// glibc's convention for a kernel result: -1 with errno set for -4095…-1, the value otherwise.
long xsb_rt_result(long ret);

/// A function of glibc's that only the supervisor calls (the shim's objects are linked whole):
/// reached in the init, it is a bug, so the init ends at once with 127.
__attribute__((noreturn)) void xsb_rt_supervisor_only(void);

#endif
