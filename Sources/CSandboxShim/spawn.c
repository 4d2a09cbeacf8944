// Parent side of a launch: clone3 into new namespaces, map ids, join cgroups, release the
// child, and wait until its payload has exec'd (or a step failed).
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
#include <time.h>
#include <unistd.h>

#include "child.h"

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

/// The supervisor's command line and environment (from /proc/self/stat: arg_start, arg_end,
/// env_start, env_end), which the init overwrites in its copy so that /proc/1/cmdline and
/// /proc/1/environ show nothing of the host inside. Read once: they do not move. Only the
/// spawner thread calls this.
static void host_memory_areas(struct xsb_memory_area areas[2]) {
    static struct xsb_memory_area cached[2];
    static int known;
    if (!known) {
        known = 1;
        char buf[2048];
        int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0) close(fd);
        if (n > 0) {
            buf[n] = '\0';
            // Fields 48-51; the comm field (2) may hold spaces, so count from the last ')'
            // (field 3 is the first after it).
            char *p = strrchr(buf, ')');
            unsigned long long values[4] = {0, 0, 0, 0};
            int field = 2;
            while (p != NULL && *p != '\0' && field < 51) {
                p = strchr(p, ' ');
                if (p == NULL) break;
                p++;
                field++;
                if (field >= 48) values[field - 48] = strtoull(p, NULL, 10);
            }
            if (field == 51 && values[0] < values[1] && values[2] <= values[3]) {
                cached[0] = (struct xsb_memory_area){(uintptr_t)values[0], (uintptr_t)values[1]};
                cached[1] = (struct xsb_memory_area){(uintptr_t)values[2], (uintptr_t)values[3]};
            }
        }
    }
    areas[0] = cached[0];
    areas[1] = cached[1];
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
    struct xsb_memory_area hidden[2];
    host_memory_areas(hidden);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        fail(out, XSB_STEP_SOCKETPAIR, errno, "socketpair");
        return -1;
    }

    // Block every signal across clone so no Swift or NIO handler runs in the child before it
    // resets dispositions; the payload unblocks right before exec.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);

    int pidfd = -1;
    struct xsb_clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                 CLONE_NEWUTS | CLONE_PIDFD;
    args.pidfd = (uint64_t)(uintptr_t)&pidfd;
    if (cfg->cgroup_directory_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cfg->cgroup_directory_fd;
    }
    args.exit_signal = SIGCHLD;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) {
        // Child: from here on only async-signal-safe code (see child.h).
        close(sv[0]);
        xsb_init_main(cfg, sv[1], hidden);
    }
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        fail(out, XSB_STEP_CLONE, clone_errno, "clone3");
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
