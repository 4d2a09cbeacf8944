// The sandbox init: PID 1 of the sandbox's PID namespace. It builds the sandbox (ids are
// mapped by the parent first), starts the payload, and then stays as a tiny reaper that the
// supervisor commands over the control socket. When it exits, the kernel kills every other
// process of the namespace, so "the init is gone" always means "the sandbox is gone".
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

__attribute__((noreturn)) static void die(int control_fd, int step, int err, const char *detail) {
    xsb_child_report(control_fd, step, err, detail);
    _exit(127);
}

/// A new network namespace has only a loopback device, and it is down.
static int bring_up_loopback(void) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    xsb_copy_string(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

static int send_ready(int control_fd, pid_t payload, int listener_fd) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = XSB_MSG_READY;
    msg.value = payload;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof msg};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &listener_fd, sizeof(int));
    return sendmsg(control_fd, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof msg ? 0 : -1;
}

static void send_msg3(int control_fd, uint32_t type, int32_t value, int32_t value2) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = type;
    msg.value = value;
    msg.value2 = value2;
    (void)send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
}

/// Starts the payload and waits (vfork) until it has exec'd or failed. The payload shares our
/// fd table (CLONE_FILES), so the seccomp listener it creates right before exec stays here
/// for us to hand to the supervisor, while exec itself leaves the payload with its own table.
static pid_t start_payload(const struct xsb_spawn_config *cfg, int control_fd, int *listener_fd) {
    int status_pipe[2];
    if (pipe2(status_pipe, O_CLOEXEC | O_NONBLOCK) != 0) die(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "pipe2");

    long child = syscall(SYS_clone, CLONE_VFORK | CLONE_FILES | SIGCHLD, 0, NULL, NULL, 0);
    if (child == 0) xsb_payload_main(cfg, status_pipe[1]);
    if (child < 0) die(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "clone");

    // Back here the payload has exec'd or exited. Read what it recorded.
    struct xsb_payload_status rec, error = {0};
    int listener = -1, have_error = 0;
    while (read(status_pipe[0], &rec, sizeof rec) == (ssize_t)sizeof rec) {
        if (rec.kind == 1) listener = rec.value;
        else if (rec.kind == 2 && !have_error) {
            error = rec;
            have_error = 1;
        }
    }
    close(status_pipe[0]);
    close(status_pipe[1]);
    if (have_error) {
        error.detail[sizeof error.detail - 1] = '\0';
        if (listener >= 0) close(listener);
        die(control_fd, error.step, error.value, error.detail);
    }
    if (listener < 0) die(control_fd, XSB_STEP_SPAWN_PAYLOAD, ECHILD, "payload ended before exec");
    *listener_fd = listener;
    return (pid_t)child;
}

__attribute__((noreturn)) static void serve(int control_fd, pid_t payload) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    // Every signal is still blocked (inherited from the parent), so SIGCHLD queues for the fd.
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) _exit(127);

    struct pollfd fds[2] = {{.fd = control_fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            _exit(127);
        }
        if (fds[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {}
            int status;
            pid_t p;
            while ((p = waitpid(-1, &status, WNOHANG | __WALL)) > 0) {
                if (p == payload) {
                    send_msg3(control_fd, XSB_MSG_EXIT, status, 0);
                    // Our exit ends the namespace: the kernel kills whatever the payload left.
                    _exit(0);
                }
            }
        }
        if (fds[0].revents & POLLIN) {
            struct xsb_msg msg;
            ssize_t n = recv(control_fd, &msg, sizeof msg, 0);
            if (n == 0) _exit(1);  // the supervisor is gone: take the sandbox down with it
            if (n != (ssize_t)sizeof msg) continue;
            int err = 0;
            switch (msg.type) {
            case XSB_MSG_SUSPEND:
                // kill(-1) from PID 1 reaches every other process of the namespace, including
                // ones being forked right now (the kernel delivers it to new children too).
                if (kill(-1, SIGSTOP) != 0 && errno != ESRCH) err = errno;
                send_msg3(control_fd, XSB_MSG_ACK, XSB_MSG_SUSPEND, err);
                break;
            case XSB_MSG_RESUME:
                if (kill(-1, SIGCONT) != 0 && errno != ESRCH) err = errno;
                send_msg3(control_fd, XSB_MSG_ACK, XSB_MSG_RESUME, err);
                break;
            case XSB_MSG_SIGNAL:
                if (msg.value > 0 && msg.value < 65 && kill(-payload, msg.value) != 0) err = errno;
                send_msg3(control_fd, XSB_MSG_ACK, XSB_MSG_SIGNAL, err);
                break;
            default:
                break;
            }
        } else if (fds[0].revents & (POLLHUP | POLLERR)) {
            _exit(1);
        }
    }
}

void xsb_init_main(const struct xsb_spawn_config *cfg, int control_fd) {
    // The parent-death signal is bound to the spawner thread, which lives as long as the
    // supervisor. If the parent died before this line, the handshake below reads EOF.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) die(control_fd, XSB_STEP_PARENT_DEATH_SIGNAL, errno, "prctl");
    (void)prctl(PR_SET_NAME, "xsb-init", 0, 0, 0);  // what ps shows; the spawner thread's name otherwise

    struct xsb_msg msg;
    ssize_t n;
    do {
        n = recv(control_fd, &msg, sizeof msg, 0);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof msg || msg.type != XSB_MSG_GO) _exit(127);

    // We join the sandbox's cgroup before this, so the namespace's root is that cgroup.
    // Kernels without cgroup namespaces say EINVAL: that one step is optional by design.
    if (unshare(CLONE_NEWCGROUP) != 0 && errno != EINVAL) die(control_fd, XSB_STEP_CGROUP_NAMESPACE, errno, "unshare");
    if (sethostname(cfg->hostname, xsb_string_length(cfg->hostname)) != 0) die(control_fd, XSB_STEP_HOSTNAME, errno, cfg->hostname);
    if (setdomainname("none", 4) != 0) die(control_fd, XSB_STEP_HOSTNAME, errno, "domainname");
    if (bring_up_loopback() != 0) die(control_fd, XSB_STEP_LOOPBACK, errno, "lo");
    if (xsb_setup_mounts(cfg, control_fd) != 0) _exit(127);

    // The payload shares our fd table until exec and places its fds at 0, 1, 2, 3…: keep the
    // control socket far above them.
    int high = fcntl(control_fd, F_DUPFD_CLOEXEC, XSB_FD_FLOOR + (int)cfg->extra_fd_count);
    if (high < 0) die(control_fd, XSB_STEP_FILE_DESCRIPTORS, errno, "control socket");
    close(control_fd);
    control_fd = high;

    int listener = -1;
    pid_t payload = start_payload(cfg, control_fd, &listener);
    if (send_ready(control_fd, payload, listener) != 0) _exit(127);
    close(listener);

    // Keep nothing but the control socket: the init must not hold the caller's stdio or
    // anything else open for the lifetime of the sandbox.
    if (control_fd > 0) syscall(SYS_close_range, 0, control_fd - 1, 0);
    syscall(SYS_close_range, control_fd + 1, ~0U, 0);
    serve(control_fd, payload);
}
