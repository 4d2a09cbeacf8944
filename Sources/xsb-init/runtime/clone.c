// clone(fn, stack, flags, arg, parent_tid, tls, child_tid), as glibc's: the child runs fn(arg)
// on `stack` and ends (that task only: exit, not exit_group) with fn's value. The receiver
// thread (receiver.c) and a pre-built sandbox's waiting payload (waiting_payload.c) start so.
// The child's side cannot be C: it must not return into the parent's frames, which it shares
// (CLONE_VM) but whose stack is not its own.
#define _GNU_SOURCE
#include "runtime.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/syscall.h>

/// The system call, and fn(arg) then exit in the child. Returns the kernel's result in the parent.
long xsb_rt_clone(int (*fn)(void *), void *stack, long flags, void *arg, void *parent_tid, void *tls, void *child_tid);

#if defined(__x86_64__)
// The kernel's argument order on x86_64: flags, stack, parent_tid, child_tid, tls.
__asm__(".text\n"
        ".globl xsb_rt_clone\n"
        ".type xsb_rt_clone, @function\n"
        "xsb_rt_clone:\n"
        "    and $-16, %rsi\n"
        "    sub $16, %rsi\n"
        "    mov %rcx, 8(%rsi)\n"        // arg and fn go on the child's stack
        "    mov %rdi, 0(%rsi)\n"
        "    mov %rdx, %rdi\n"           // flags
        "    mov %r8, %rdx\n"            // parent_tid
        "    mov %r9, %r8\n"             // tls
        "    mov 8(%rsp), %r10\n"        // child_tid, the seventh argument
        "    mov $" XSB_RT_STRINGIFY(SYS_clone) ", %eax\n"
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"                      // the parent (or the error)
        "1:  xor %ebp, %ebp\n"           // the child's outermost frame
        "    pop %rax\n"
        "    pop %rdi\n"
        "    call *%rax\n"               // 16-byte aligned before the call, as the ABI wants
        "    mov %rax, %rdi\n"
        "    mov $" XSB_RT_STRINGIFY(SYS_exit) ", %eax\n"
        "    syscall\n"
        "    hlt\n"
        ".size xsb_rt_clone, . - xsb_rt_clone\n");
#else
// The kernel's argument order on aarch64: flags, stack, parent_tid, tls, child_tid.
__asm__(".text\n"
        ".globl xsb_rt_clone\n"
        ".type xsb_rt_clone, %function\n"
        "xsb_rt_clone:\n"
        "    and x1, x1, #-16\n"
        "    stp x0, x3, [x1, #-16]!\n"  // fn and arg go on the child's stack
        "    mov x0, x2\n"               // flags
        "    mov x2, x4\n"               // parent_tid
        "    mov x3, x5\n"               // tls
        "    mov x4, x6\n"               // child_tid
        "    mov x8, #" XSB_RT_STRINGIFY(SYS_clone) "\n"
        "    svc #0\n"
        "    cbz x0, 1f\n"
        "    ret\n"
        "1:  mov x29, #0\n"
        "    ldp x1, x0, [sp], #16\n"
        "    blr x1\n"
        "    mov x8, #" XSB_RT_STRINGIFY(SYS_exit) "\n"
        "    svc #0\n"
        ".size xsb_rt_clone, . - xsb_rt_clone\n");
#endif

int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...) {
    if (fn == NULL || stack == NULL) {
        errno = EINVAL;
        return -1;
    }
    // The optional arguments are read whether passed or not, as glibc's assembly reads their
    // registers: the kernel looks at them only for the flags that name them.
    va_list ap;
    va_start(ap, arg);
    void *parent_tid = va_arg(ap, void *);
    void *tls = va_arg(ap, void *);
    void *child_tid = va_arg(ap, void *);
    va_end(ap);
    return (int)xsb_rt_result(xsb_rt_clone(fn, stack, (long)(unsigned)flags, arg, parent_tid, tls, child_tid));
}
