// Parent side of a launch: clone3 into new namespaces, map ids, join cgroups, release the
// child, and wait until its payload has exec'd (or a step failed).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
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

/// Takes the payload's seccomp listener out of the init's fd table (shared with the payload
/// until its exec). The payload announced the number before loading its filter; the fd appears
/// microseconds later, so this retries until then or until the control socket speaks (an ERROR
/// when loading failed).
static int take_listener(int pidfd, int number, int control_fd, int64_t deadline) {
    for (;;) {
        long fd = syscall(SYS_pidfd_getfd, pidfd, number, 0);
        if (fd >= 0) {
            // It must be the listener, not whatever else could sit at that number.
            char link[64], target[64];
            snprintf(link, sizeof link, "/proc/self/fd/%ld", fd);
            ssize_t len = readlink(link, target, sizeof target - 1);
            if (len > 0) target[len] = '\0';
            if (len > 0 && strstr(target, "seccomp") != NULL) return (int)fd;
            close((int)fd);
            return -EBADF;
        }
        if (errno != EBADF) return -errno;
        if (now_ms() > deadline) return -ETIMEDOUT;
        struct pollfd p = {.fd = control_fd, .events = POLLIN};
        if (control_fd >= 0 && poll(&p, 1, 0) > 0) return -EAGAIN;  // a message (an ERROR) came first
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000};
        nanosleep(&pause, NULL);
    }
}

/// During the launch the filter may already stop a call: the launch's own first execve when
/// exec after start is supervised (it continues), anything in audit mode (recorded, continues),
/// or a violation by the freshly exec'd program (left blocked, reported to the caller to kill).
static void answer_notification(const struct xsb_spawn_config *cfg, int listener, int *first_exec_done,
                                struct xsb_spawn_result *out) {
    int nr;
    uint32_t arch;
    pid_t target;
    uint64_t id;
    if (xsb_notify_receive(listener, &nr, &arch, &target, &id) != 0) return;
    if (cfg->supervise_first_exec && !*first_exec_done && (nr == SYS_execve || nr == SYS_execveat)) {
        *first_exec_done = 1;
        (void)xsb_notify_continue(listener, id);
    } else if (cfg->audit) {
        if (out->audited_count < (int)(sizeof out->audited / sizeof out->audited[0])) out->audited[out->audited_count++] = nr;
        (void)xsb_notify_continue(listener, id);
    } else if (out->early_violation < 0) {
        out->early_violation = nr;
    }
}

static void fail(struct xsb_spawn_result *out, int step, int err, const char *detail) {
    out->failed_step = step;
    out->error_number = err;
    xsb_copy_string(out->detail, sizeof out->detail, detail);
}

int xsb_spawn(const struct xsb_spawn_config *cfg, struct xsb_spawn_result *out) {
    memset(out, 0, sizeof *out);
    out->pidfd = out->control_fd = out->notify_fd = -1;
    out->early_violation = -1;

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
        xsb_init_main(cfg, sv[1]);
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
        int listener = -1, announced = -1, first_exec_done = 0;
        struct xsb_msg msg;
        memset(&msg, 0, sizeof msg);
        rc = 0;
        for (;;) {
            int64_t left = deadline - now_ms();
            if (left <= 0) {
                rc = -ETIMEDOUT;
                break;
            }
            struct pollfd p[2] = {{.fd = sv[0], .events = POLLIN}, {.fd = listener, .events = POLLIN}};
            int r = poll(p, listener >= 0 ? 2 : 1, (int)left);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                rc = -errno;
                break;
            }
            if (listener >= 0 && (p[1].revents & POLLIN)) {
                answer_notification(cfg, listener, &first_exec_done, out);
                if (!first_exec_done && (out->early_violation == SYS_execve || out->early_violation == SYS_execveat)) {
                    // The filter stopped the launch's own exec (a policy that denies execve):
                    // the init would wait in vfork until the timeout. Fail now, and say why.
                    msg.type = XSB_MSG_ERROR;
                    msg.step = XSB_STEP_EXEC;
                    msg.value = EPERM;
                    xsb_copy_string(msg.detail, sizeof msg.detail, "the policy's seccomp filter denies execve");
                    break;
                }
            }
            if (!(p[0].revents & (POLLIN | POLLHUP))) continue;
            int got = xsb_recv_msg(sv[0], &msg);
            if (got < 0) {
                rc = got;
                break;
            }
            if (got == 0) continue;
            if (msg.type == XSB_MSG_LISTENER && listener < 0) {
                announced = msg.value;
                int fd = take_listener(pidfd, announced, sv[0], deadline);
                if (fd >= 0) listener = fd;
                else if (fd != -EAGAIN) {
                    rc = fd;
                    break;
                }
                continue;
            }
            if (msg.type == XSB_MSG_READY && listener < 0 && announced >= 0) {
                // READY came while we were between two attempts; the fd exists since before
                // the exec and the init keeps it until LISTENER_TAKEN.
                // One attempt: after READY the fd exists or never will (a signal ended the
                // payload before seccomp), and polling to the deadline would hold up every launch.
                int fd = take_listener(pidfd, announced, -1, now_ms());
                if (fd >= 0) listener = fd;
            }
            if (msg.type == XSB_MSG_READY || msg.type == XSB_MSG_ERROR) break;
        }
        if (rc == 0 && msg.type == XSB_MSG_READY && listener >= 0) {
            rc = xsb_send_msg(sv[0], XSB_MSG_LISTENER_TAKEN, 0);
            if (rc != 0) msg.type = 0;
        }
        if (rc == 0 && msg.type == XSB_MSG_READY && listener >= 0) {
            out->notify_fd = listener;
            out->payload_pid = msg.value;
            return 0;
        }
        if (listener >= 0) close(listener);
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
            xsb_copy_string(detail, sizeof detail, rc == -EPIPE ? "sandbox init exited"
                                                   : rc == 0 ? "ready without a seccomp listener" : "taking the seccomp listener");
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
