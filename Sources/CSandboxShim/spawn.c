// Parent side of a launch, on the supervisor's spawner thread: take the launch's fds over,
// write the launch description, clone3 into new namespaces and exec the sandbox init there
// (xsb-init), map ids, release the init, and hand its control socket and pidfd back; later,
// from the monitor thread, take its report that the payload has exec'd (or a step failed). The
// supervisor's table of contents: each step is in the file of its mechanism.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

/// clone3 with a stack of its own: the child starts on `stack` (args->stack) and runs
/// `child(arg)`, then exits with its return value; the parent gets the child's pid or -errno.
/// glibc has no public clone3 wrapper, and a child that shares the caller's memory
/// (CLONE_VM) cannot return through the C function that made the system call: the parent's
/// stack frame is still in use (and, with CLONE_VFORK, suspended). Like glibc's clone.S.
long xsb_clone3_on_stack(struct xsb_clone_args *args, size_t size, int (*child)(void *), void *arg);
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl xsb_clone3_on_stack\n"
        ".type xsb_clone3_on_stack,@function\n"
        "xsb_clone3_on_stack:\n"
        "    mov %rdx, %r8\n"          // child: kept in registers the kernel preserves
        "    mov %rcx, %r9\n"          // arg
        "    mov $435, %eax\n"         // SYS_clone3 (args and size already in rdi, rsi)
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"                    // parent: pid or -errno
        "1:  xor %ebp, %ebp\n"         // child, on its own stack: outermost frame
        "    mov %r9, %rdi\n"
        "    call *%r8\n"
        "    mov %eax, %edi\n"
        "    mov $60, %eax\n"          // SYS_exit
        "    syscall\n"
        "    hlt\n"
        ".size xsb_clone3_on_stack, .-xsb_clone3_on_stack\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl xsb_clone3_on_stack\n"
        ".type xsb_clone3_on_stack,%function\n"
        "xsb_clone3_on_stack:\n"
        "    mov x10, x2\n"
        "    mov x11, x3\n"
        "    mov x8, #435\n"
        "    svc #0\n"
        "    cbz x0, 1f\n"
        "    ret\n"
        "1:  mov x29, xzr\n"
        "    mov x30, xzr\n"
        "    mov x0, x11\n"
        "    blr x10\n"
        "    mov x8, #93\n"             // SYS_exit
        "    svc #0\n"
        "    brk #0\n"
        ".size xsb_clone3_on_stack, .-xsb_clone3_on_stack\n");
#else
#error "xsb_clone3_on_stack needs an implementation for this architecture"
#endif

/// What the clone child needs (in the supervisor's memory, which it shares until its exec) and
/// what it reports back when it fails before the exec.
struct init_start {
    int control_fd, description_fd, init_fd, cap_last_cap;
    const struct xsb_passed_fds *passed;
    int failed_step, error_number;
    const char *detail;
};

static int start_failed(struct init_start *start, int step, const char *detail) {
    start->failed_step = step;
    start->error_number = errno;
    start->detail = detail;
    return 127;
}

/// The clone child, in the new namespaces with every capability there, sharing the
/// supervisor's memory (so: raw system calls, nothing that allocates or locks). It keeps its
/// capabilities across the exec as ambient ones (the kernel would drop them otherwise: this
/// namespace has no uid 0 mapped yet, and later none at all), puts the init's fds in place
/// (control socket, description, the passed fds), closes every other fd of the supervisor's,
/// and execs the init by fd.
static int start_init(void *arg) {
    struct init_start *start = arg;
    const char *failed = xsb_keep_capabilities_across_exec(start->cap_last_cap);  // capabilities.c
    if (failed != NULL) return start_failed(start, XSB_STEP_INIT_EXEC, failed);
    int init = xsb_place_init_fds(start->control_fd, start->description_fd, start->passed, start->init_fd, &failed);  // fds.c
    if (init < 0) return start_failed(start, XSB_STEP_FILE_DESCRIPTORS, failed);

    static char *const argv[] = {(char *)"xsb-init", NULL};
    static char *const envp[] = {NULL};
    syscall(SYS_execveat, init, "", argv, envp, AT_EMPTY_PATH);
    return start_failed(start, XSB_STEP_INIT_EXEC, "execveat");
}

static void fail(struct xsb_spawn_result *out, int step, int err, const char *detail) {
    out->failed_step = step;
    out->error_number = err;
    xsb_copy_string(out->detail, sizeof out->detail, detail);
}

// Fail closed: nothing of a half-built sandbox survives. The child may have failed first (and
// its failure made ours): its report names the cause.
static int abandon_launch(struct xsb_spawn_result *out, int step, int err, const char *why) {
    char detail[256];
    xsb_copy_string(detail, sizeof detail, why);
    if (step == XSB_STEP_HANDSHAKE) xsb_control_take_init_report(out->control_fd, &step, &err, detail, sizeof detail);  // control.c
    xsb_pidfd_send_signal(out->pidfd, SIGKILL);  // signals.c
    (void)xsb_pidfd_wait(out->pidfd);
    close(out->pidfd);
    close(out->control_fd);
    out->pidfd = out->control_fd = -1;
    fail(out, step, err, detail);
    return -1;
}

int xsb_spawn_start(const struct xsb_spawn_config *cfg, struct xsb_spawn_result *out) {
    memset(out, 0, sizeof *out);
    out->pidfd = out->control_fd = -1;
    out->early_violation = XSB_NO_VIOLATION;

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        fail(out, XSB_STEP_SOCKETPAIR, errno, "socketpair");
        return -1;
    }
    struct xsb_passed_fds passed;
    int description = -1;
    if (xsb_description_create(cfg, &passed, &description) != 0) {
        fail(out, XSB_STEP_LAUNCH_DESCRIPTION, errno, "writing the launch description (memfd)");
        close(sv[0]);
        close(sv[1]);
        return -1;
    }

    // Block every signal across clone so no Swift or NIO handler runs in the child (it shares
    // our memory until its exec); the init keeps them blocked, the payload unblocks right
    // before its exec.
    sigset_t old;
    xsb_signals_block_all(&old);  // signals.c

    struct init_start start = {
        .control_fd = sv[1], .description_fd = description, .init_fd = cfg->init_fd,
        .cap_last_cap = cfg->cap_last_cap, .passed = &passed,
    };
    // The child's stack, in this frame: CLONE_VFORK suspends us until the child has exec'd
    // (or exited), so the frame outlives every use of it.
    _Alignas(64) unsigned char stack[32 * 1024];
    int pidfd = -1;
    struct xsb_clone_args args;
    memset(&args, 0, sizeof args);
    // CLONE_VM | CLONE_VFORK: the child borrows our address space until its exec (no page table
    // is copied, however large the supervisor), like posix_spawn.
    args.flags = CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
                 CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD;
    args.pidfd = (uint64_t)(uintptr_t)&pidfd;
    xsb_cgroup_clone_into(cfg, &args);  // cgroups.c
    args.exit_signal = SIGCHLD;
    args.stack = (uint64_t)(uintptr_t)stack;
    args.stack_size = sizeof stack;
    long pid = cfg->init_fd > 2 ? xsb_clone3_on_stack(&args, sizeof args, start_init, &start) : -EBADF;
    xsb_signals_restore(&old);  // signals.c
    close(sv[1]);
    close(description);
    if (pid < 0) {
        close(sv[0]);
        fail(out, XSB_STEP_CLONE, (int)-pid, cfg->init_fd > 2 ? "clone3" : "no sandbox init (xsb-init) given");
        return -1;
    }
    if (start.failed_step != XSB_STEP_NONE) {
        // The child failed before its exec (and exited): nothing of the sandbox runs.
        (void)xsb_pidfd_wait(pidfd);
        close(pidfd);
        close(sv[0]);
        fail(out, start.failed_step, start.error_number, start.detail);
        return -1;
    }
    out->pid = (pid_t)pid;
    out->pidfd = pidfd;
    out->control_fd = sv[0];

    char detail[256] = "";
    int rc = xsb_userns_map_ids((pid_t)pid, cfg, detail, sizeof detail);  // userns.c
    if (rc != 0) return abandon_launch(out, XSB_STEP_USERNS_MAP, -rc, detail);
    if ((rc = xsb_send_msg(sv[0], XSB_MSG_GO, 0)) != 0) return abandon_launch(out, XSB_STEP_HANDSHAKE, -rc, "release message");
    return 0;
}

int xsb_spawner_launch(int inbox, int expected, struct xsb_spawn_config *cfg, int clear_groups, struct xsb_spawn_result *out) {
    memset(out, 0, sizeof *out);
    out->pidfd = out->control_fd = -1;
    out->early_violation = XSB_NO_VIOLATION;
    struct xsb_spawner_fds storage;
    int rc = xsb_spawner_take_over(inbox, expected, &storage);  // spawner_table.c
    if (rc != 0) {
        fail(out, XSB_STEP_FILE_DESCRIPTORS, -rc, "handing the launch's fds to the spawner thread");
    } else if ((rc = xsb_spawner_apply(cfg, &storage)) != 0) {
        fail(out, XSB_STEP_FILE_DESCRIPTORS, -rc, "placing the launch's fds on the spawner thread");
    } else if (clear_groups && (rc = xsb_clear_thread_groups()) != 0 && rc != EPERM) {  // userns.c
        // Root's supplementary groups would follow the sandbox (it cannot drop them). EPERM:
        // setgroups is denied to this supervisor itself (it runs in a user namespace that
        // denies it), so its groups are as fixed as an unprivileged caller's, which the sandbox
        // keeps too.
        fail(out, XSB_STEP_USERNS_MAP, rc, "setgroups (the spawner thread's supplementary groups)");
    } else if (xsb_spawn_start(cfg, out) == 0 && (rc = xsb_spawner_send_result(storage.reply, out)) != 0) {
        // Fail closed: no sandbox runs that its host cannot reach.
        xsb_pidfd_send_signal(out->pidfd, SIGKILL);  // signals.c
        (void)xsb_pidfd_wait(out->pidfd);
        out->pidfd = out->control_fd = -1;  // closed with the rest of the table below
        fail(out, XSB_STEP_FILE_DESCRIPTORS, -rc, "returning the sandbox's control socket and pidfd");
    }
    xsb_spawner_table_clear(inbox);  // spawner_table.c
    return out->failed_step == XSB_STEP_NONE ? 0 : -1;
}

int xsb_spawn_poll(struct xsb_spawn_result *out, int *step, int *err, char *detail, size_t detail_size) {
    return xsb_control_poll_launch(out->control_fd, out, step, err, detail, detail_size);  // control.c
}

void xsb_spawn_abandon(struct xsb_spawn_result *out, int step, int err, const char *why) {
    (void)abandon_launch(out, step, err, why);
}
