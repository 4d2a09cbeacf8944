// The init's entry point: the kernel jumps to _start with the stack as it built it (argc, argv,
// envp, auxv). The init takes no arguments and reads no environment, so _start only aligns the
// stack for a C call, relocates the executable (relocate.c) and runs main. Nothing else runs
// before main: there are no constructors to run (the shim's one, which fills closed standard
// fds for the supervisor, is not for the init: its fd 0 is the control socket and fd 1 the
// description), no TLS and no stack protector canary.
#include "runtime.h"

#include <sys/syscall.h>

#include <elf.h>

extern int main(void);
void xsb_rt_relocate(unsigned long page_size);

/// The page size the kernel gives in the auxiliary vector, which follows argv's and envp's
/// terminating NULLs on the initial stack `sp` (argc first).
static unsigned long page_size_from(const long *sp) {
    const long *p = sp + 1 + sp[0] + 1;  // past argc, argv and its NULL
    while (*p != 0) p++;                  // past envp
    for (p++; p[0] != AT_NULL; p += 2) {
        if (p[0] == AT_PAGESZ) return (unsigned long)p[1];
    }
    return 4096;
}

/// Called by _start on a 16-byte aligned stack with the kernel's initial stack pointer; ends
/// the process with main's value.
__attribute__((noreturn, used)) void xsb_rt_start(const long *sp) {
    xsb_rt_relocate(page_size_from(sp));
    int status = main();
    xsb_rt_exit_group(status);
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start, @function\n"
        "_start:\n"
        "    xor %ebp, %ebp\n"         // the outermost frame
        "    mov %rsp, %rdi\n"         // the initial stack, for the auxiliary vector
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
