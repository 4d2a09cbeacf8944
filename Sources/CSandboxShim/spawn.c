// Parent side of a launch: write the launch description, clone3 into new namespaces and exec
// the sandbox init there (xsb-init), map ids, release the init, and wait until its payload
// has exec'd (or a step failed).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "child.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#endif

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

// struct clone_args from linux/sched.h, spelled out to avoid header clashes with <sched.h>.
struct xsb_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    uint64_t set_tid, set_tid_size, cgroup;
};

/// If the process started with fd 0, 1 or 2 closed, the next file the runtime opens (Dispatch's
/// epoll, a socket…) lands there, and a launch that passes "our stdin" would hand it to the
/// sandbox. Fill closed standard fds with /dev/null before anything else runs.
__attribute__((constructor)) static void xsb_ensure_standard_fds(void) {
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int null = open("/dev/null", O_RDWR);
            if (null >= 0 && null != fd) close(null);  // lowest free is `fd` unless something raced
        }
    }
}

int xsb_pidfd_wait(int pidfd) {
    siginfo_t info;
    while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED) != 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

int xsb_pidfd_send_signal(int pidfd, int sig) {
    if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0) return 0;
    return -errno;
}

int xsb_pidfd_reap(int pidfd, int *wait_status) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED | WNOHANG) != 0) return -errno;
    if (info.si_pid == 0) return 0;
    // Rebuild the classic wait status so callers can use WIFEXITED & co.
    if (info.si_code == CLD_EXITED) *wait_status = (info.si_status & 0xff) << 8;
    else *wait_status = (info.si_status & 0x7f) | (info.si_code == CLD_DUMPED ? 0x80 : 0);
    return 1;
}

static int write_file(const char *path, const char *text, char *detail, size_t detail_size) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        xsb_copy_string(detail, detail_size, path);
        return -errno;
    }
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    int err = (n == (ssize_t)len) ? 0 : (n < 0 ? errno : EIO);
    close(fd);
    if (err != 0) {
        xsb_copy_string(detail, detail_size, path);
        return -err;
    }
    return 0;
}

/// setgroups=deny first: an unprivileged writer may not map gids otherwise, and it keeps the
/// sandbox from dropping supplementary groups to get around "deny" permissions.
static int map_ids(pid_t pid, const struct xsb_spawn_config *cfg, char *detail, size_t size) {
    char path[64], line[64];
    int rc;
    snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
    if ((rc = write_file(path, "deny", detail, size)) != 0) return rc;
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    snprintf(line, sizeof line, "%u %u 1\n", cfg->uid_inside, cfg->uid_outside);
    if ((rc = write_file(path, line, detail, size)) != 0) return rc;
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    snprintf(line, sizeof line, "%u %u 1\n", cfg->gid_inside, cfg->gid_outside);
    return write_file(path, line, detail, size);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &header, caps) != 0) return start_failed(start, XSB_STEP_INIT_EXEC, "capget");
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) caps[i].inheritable = caps[i].permitted;
    if (syscall(SYS_capset, &header, caps) != 0) return start_failed(start, XSB_STEP_INIT_EXEC, "capset (inheritable)");
    for (int cap = 0; cap <= start->cap_last_cap; cap++) {
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) return start_failed(start, XSB_STEP_INIT_EXEC, "ambient capabilities");
    }

    // Every source first goes above every target, then onto its target; the init's own fd
    // (close-on-exec) right after the last.
    int count = 2 + start->passed->count;
    int floor = count + 1;
    int moved[2 + 3 + XSB_MAX_EXTRA_FDS + 4 + 1];
    for (int i = 0; i <= count; i++) {
        int source = i == 0 ? start->control_fd : i == 1 ? start->description_fd
                   : i == count ? start->init_fd : start->passed->host[i - 2];
        moved[i] = fcntl(source, F_DUPFD_CLOEXEC, floor);
        if (moved[i] < 0) return start_failed(start, XSB_STEP_FILE_DESCRIPTORS, "moving the init's fds");
    }
    for (int i = 0; i <= count; i++) {
        if (syscall(SYS_dup3, moved[i], i, i == count ? O_CLOEXEC : 0) < 0) return start_failed(start, XSB_STEP_FILE_DESCRIPTORS, "placing the init's fds");
    }
    if (syscall(SYS_close_range, (unsigned)floor, ~0U, 0) != 0) return start_failed(start, XSB_STEP_FILE_DESCRIPTORS, "close_range");

    static char *const argv[] = {(char *)"xsb-init", NULL};
    static char *const envp[] = {NULL};
    syscall(SYS_execveat, count, "", argv, envp, AT_EMPTY_PATH);
    return start_failed(start, XSB_STEP_INIT_EXEC, "execveat");
}

static void fail(struct xsb_spawn_result *out, int step, int err, const char *detail) {
    out->failed_step = step;
    out->error_number = err;
    xsb_copy_string(out->detail, sizeof out->detail, detail);
}

int xsb_spawn(const struct xsb_spawn_config *cfg, struct xsb_spawn_result *out) {
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
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);

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
    if (cfg->cgroup_directory_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cfg->cgroup_directory_fd;
    }
    args.exit_signal = SIGCHLD;
    args.stack = (uint64_t)(uintptr_t)stack;
    args.stack_size = sizeof stack;
    long pid = cfg->init_fd > 2 ? xsb_clone3_on_stack(&args, sizeof args, start_init, &start) : -EBADF;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
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

    int step = XSB_STEP_NONE, err = 0;
    char detail[256] = "";
    int rc = map_ids((pid_t)pid, cfg, detail, sizeof detail);
    if (rc != 0) {
        step = XSB_STEP_USERNS_MAP;
        err = -rc;
    } else if ((rc = xsb_send_msg(sv[0], XSB_MSG_GO, 0)) != 0) {
        step = XSB_STEP_HANDSHAKE;
        err = -rc;
        xsb_copy_string(detail, sizeof detail, "release message");
    } else {
        int64_t deadline = now_ms() + (cfg->setup_timeout_ms > 0 ? cfg->setup_timeout_ms : 10000);
        struct xsb_msg msg;
        memset(&msg, 0, sizeof msg);
        rc = 0;
        for (;;) {
            int64_t left = deadline - now_ms();
            if (left <= 0) {
                rc = -ETIMEDOUT;
                break;
            }
            struct pollfd p = {.fd = sv[0], .events = POLLIN};
            int r = poll(&p, 1, (int)left);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                rc = -errno;
                break;
            }
            if (!(p.revents & (POLLIN | POLLHUP))) continue;
            int got = xsb_recv_msg(sv[0], &msg);
            if (got < 0) {
                rc = got;
                break;
            }
            if (got == 0) continue;
            // During the launch the init's receiver may already report: audit mode's calls
            // (they continued), or a violation by the freshly exec'd program (the sandbox is
            // ending: the launch returns it, and the caller reports how it ended).
            if (msg.type == XSB_MSG_AUDITED) {
                if (out->audited_count < (int)(sizeof out->audited / sizeof out->audited[0])) out->audited[out->audited_count++] = msg.value;
                continue;
            }
            if (msg.type == XSB_MSG_VIOLATION) {
                out->early_violation = msg.value >= 0 ? msg.value : XSB_UNNAMED_VIOLATION;
                return 0;
            }
            if (msg.type == XSB_MSG_READY) {
                out->payload_pid = msg.value;
                return 0;
            }
            if (msg.type == XSB_MSG_ERROR) break;
        }
        if (rc == 0 && msg.type == XSB_MSG_ERROR) {
            step = msg.step;
            err = msg.value;
            msg.detail[sizeof msg.detail - 1] = '\0';
            xsb_copy_string(detail, sizeof detail, msg.detail);
        } else if (rc == -ETIMEDOUT) {
            step = XSB_STEP_TIMEOUT;
            err = ETIMEDOUT;
            xsb_copy_string(detail, sizeof detail, "sandbox did not start in time");
        } else {
            step = XSB_STEP_HANDSHAKE;
            err = rc == 0 ? EPROTO : -rc;
            xsb_copy_string(detail, sizeof detail, rc == -EPIPE ? "sandbox init exited" : "control message");
        }
    }

    // The child may have failed first (and its failure made ours): its report names the cause.
    if (step == XSB_STEP_HANDSHAKE) {
        struct xsb_msg msg;
        if (xsb_recv_msg(sv[0], &msg) == 1 && msg.type == XSB_MSG_ERROR) {
            step = msg.step;
            err = msg.value;
            xsb_copy_string(detail, sizeof detail, msg.detail);
        }
    }

    // Fail closed: nothing of a half-built sandbox survives.
    xsb_pidfd_send_signal(pidfd, SIGKILL);
    (void)xsb_pidfd_wait(pidfd);
    close(pidfd);
    close(sv[0]);
    out->pidfd = out->control_fd = -1;
    fail(out, step, err, detail);
    return -1;
}

int xsb_send_msg(int control_fd, uint32_t type, int32_t value) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = type;
    msg.value = value;
    for (;;) {
        ssize_t n = send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof msg) return 0;
        if (n < 0 && errno == EINTR) continue;
        return n < 0 ? -errno : -EIO;
    }
}

int xsb_recv_msg(int control_fd, struct xsb_msg *msg) {
    memset(msg, 0, sizeof *msg);
    ssize_t n = recv(control_fd, msg, sizeof *msg, MSG_DONTWAIT);
    if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    if (n == 0) return -EPIPE;
    if ((size_t)n != sizeof *msg) return -EPROTO;
    msg->detail[sizeof msg->detail - 1] = '\0';
    return 1;
}
