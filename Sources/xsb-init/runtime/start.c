// The init's entry point: the kernel jumps to _start with the stack as it built it (argc, argv,
// envp, auxv). The init takes no arguments and reads no environment, so _start only aligns the
// stack for a C call, relocates the executable (relocate.c) and runs main. Nothing else runs
// before main: there are no constructors to run (the shim's one, which fills closed standard
// fds for the supervisor, is not for the init: its fd 0 is the control socket and fd 1 the
// description), no TLS and no stack protector canary.
#include "runtime.h"

#include <sys/syscall.h>

extern int main(void);
void xsb_rt_relocate(void);

/// Called by _start on a 16-byte aligned stack; ends the process with main's value.
__attribute__((noreturn, used)) void xsb_rt_start(void) {
    xsb_rt_relocate();
    int status = main();
    for (;;) xsb_inline_syscall6(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start, @function\n"
        "_start:\n"
        "    xor %ebp, %ebp\n"         // the outermost frame
        "    and $-16, %rsp\n"
        "    call xsb_rt_start\n"      // leaves the stack 16-byte aligned minus the return address, as the ABI wants
        "    hlt\n"
        ".size _start, . - _start\n");
#else
__asm__(".text\n"
        ".globl _start\n"
        ".type _start, %function\n"
        "_start:\n"
        "    mov x29, #0\n"
        "    mov x30, #0\n"
        "    mov x0, sp\n"
        "    and sp, x0, #-16\n"
        "    b xsb_rt_start\n"
        ".size _start, . - _start\n");
#endif
