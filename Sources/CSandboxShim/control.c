// The control channel: one SOCK_SEQPACKET socket of struct xsb_msg between the supervisor and
// the sandbox init, both sides. The supervisor releases the init (GO) once the ids are mapped
// and waits for READY or the failing step; afterwards it asks the init to suspend, resume or
// signal the sandbox, and the init acknowledges each request and reports the payload's exit.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

// MARK: - Supervisor side

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

#ifndef NS_GET_NSTYPE
#define NS_GET_NSTYPE _IO(0xb7, 0x3)
#endif

/// Whether `fd` is a mount namespace: a file of the namespace file system (the one our own
/// /proc/self/ns/mnt is on) whose type is CLONE_NEWNS. The file system is checked first: an
/// ioctl on a file of another could make us wait for whatever serves it (a FUSE server).
static int is_mount_namespace(int fd) {
    // The namespace file system is one for the whole system: its device is looked up once.
    static dev_t namespace_device;  // 0 until known
    struct stat passed;
    if (xsb_raw_syscall(SYS_fstat, fd, (long)&passed, 0, 0, 0) != 0) return 0;
    dev_t known = __atomic_load_n(&namespace_device, __ATOMIC_RELAXED);
    if (known == 0) {
        struct stat own;
        if (xsb_raw_syscall(SYS_newfstatat, AT_FDCWD, (long)"/proc/self/ns/mnt", (long)&own, 0, 0) != 0) return 0;
        known = own.st_dev;
        __atomic_store_n(&namespace_device, known, __ATOMIC_RELAXED);
    }
    if (passed.st_dev != known) return 0;
    return xsb_raw_syscall(SYS_ioctl, fd, NS_GET_NSTYPE, 0, 0, 0) == CLONE_NEWNS;
}

/// Closes an fd the init had no business passing, without waiting on it: a socket is reset
/// rather than lingered over (a lingering close waits until its peer takes what was sent).
static void discard_unexpected(int fd) {
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    (void)xsb_raw_syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_LINGER, (long)&reset, sizeof reset);
    close(fd);
}

int xsb_recv_msg_with_fd(int control_fd, struct xsb_msg *msg, int *passed_fd) {
    *passed_fd = -1;
    memset(msg, 0, sizeof *msg);
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof *msg};
    struct msghdr header = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    ssize_t n = recvmsg(control_fd, &header, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    // Only the EXIT report carries an fd (one); the kernel closes any beyond the buffer's room.
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&header); c; c = CMSG_NXTHDR(&header, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
            if (*passed_fd < 0) *passed_fd = fd;
            else discard_unexpected(fd);
        }
    }
    int complete = n == (ssize_t)sizeof *msg;
    // Only a mount namespace, and only with the EXIT report: anything else is not ours to keep.
    if (*passed_fd >= 0 && (!complete || msg->type != XSB_MSG_EXIT || !is_mount_namespace(*passed_fd))) {
        discard_unexpected(*passed_fd);
        *passed_fd = -1;
    }
    if (!complete) return n == 0 ? -EPIPE : -EPROTO;
    msg->detail[sizeof msg->detail - 1] = '\0';
    return 1;
}

int xsb_recv_msg(int control_fd, struct xsb_msg *msg) {
    int passed_fd;
    int got = xsb_recv_msg_with_fd(control_fd, msg, &passed_fd);
    if (passed_fd >= 0) close(passed_fd);
    return got;
}

int xsb_control_poll_launch(int control_fd, struct xsb_spawn_result *out, int *step, int *err, char *detail, size_t detail_size) {
    struct xsb_msg msg;
    for (;;) {
        int got = xsb_recv_msg(control_fd, &msg);
        if (got == 0) return 0;  // nothing more for now
        if (got < 0) {
            *step = XSB_STEP_HANDSHAKE;
            *err = got == -EPIPE ? EPIPE : -got;
            xsb_copy_string(detail, detail_size, got == -EPIPE ? "sandbox init exited" : "control message");
            return -1;
        }
        // During the launch the init's receiver may already report: audit mode's calls
        // (they continued), or a violation by the freshly exec'd program (the sandbox is
        // ending: the launch returns it, and the caller reports how it ended).
        switch (msg.type) {
        case XSB_MSG_AUDITED:
            if (out->audited_count < (int)(sizeof out->audited / sizeof out->audited[0])) out->audited[out->audited_count++] = msg.value;
            continue;
        case XSB_MSG_VIOLATION:
            out->early_violation = msg.value >= 0 ? msg.value : XSB_UNNAMED_VIOLATION;
            return 1;
        case XSB_MSG_READY:
            out->payload_pid = msg.value;
            return 1;
        case XSB_MSG_PREBUILT:
            out->prebuilt = 1;
            return 1;
        case XSB_MSG_ERROR:
            *step = msg.step;
            *err = msg.value;
            xsb_copy_string(detail, detail_size, msg.detail);
            return -1;
        default:
            continue;  // nothing else is the launch's
        }
    }
}

void xsb_control_take_init_report(int control_fd, int *step, int *err, char *detail, size_t detail_size) {
    struct xsb_msg msg;
    if (xsb_recv_msg(control_fd, &msg) == 1 && msg.type == XSB_MSG_ERROR) {
        *step = msg.step;
        *err = msg.value;
        xsb_copy_string(detail, detail_size, msg.detail);
    }
}

// MARK: - Init side

void xsb_child_report(int control_fd, int step, int err, const char *detail) {
    struct xsb_msg msg = {0};
    msg.type = XSB_MSG_ERROR;
    msg.step = step;
    msg.value = err;
    xsb_copy_string(msg.detail, sizeof msg.detail, detail);
    // MSG_NOSIGNAL: the supervisor may already be gone; we must not die of SIGPIPE here.
    (void)send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
}

void xsb_init_fail(int control_fd, int step, int err, const char *detail) {
    xsb_child_report(control_fd, step, err, detail);
    _exit(127);
}

void xsb_control_send(int control_fd, uint32_t type, int32_t value, int32_t value2) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = type;
    msg.value = value;
    msg.value2 = value2;
    (void)send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
}

#ifndef PIDFD_GET_MNT_NAMESPACE
#define PIDFD_GET_MNT_NAMESPACE _IO(0xFF, 3)
#endif

/// The init's own mount namespace as an fd, or -1: through a pidfd of itself (Linux 6.11),
/// else its /proc entry (the sandbox's own procfs, which nothing in the sandbox can remount).
static int own_mount_namespace(void) {
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd >= 0) {
        int ns = ioctl(pidfd, PIDFD_GET_MNT_NAMESPACE, 0);
        close(pidfd);
        if (ns >= 0) return ns;
    }
    return open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
}

void xsb_control_send_exit(int control_fd, int32_t status) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = XSB_MSG_EXIT;
    msg.value = status;
    // The supervisor keeps the namespace for a moment, so that our exit only drops a count:
    // the unmounting (an RCU grace period, the superblocks) then happens after the sandbox's
    // end is reported rather than before the init can be reaped.
    int ns = own_mount_namespace();
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof msg};
    struct msghdr header = {.msg_iov = &iov, .msg_iovlen = 1};
    if (ns >= 0) {
        header.msg_control = control.buf;
        header.msg_controllen = sizeof control.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&header);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &ns, sizeof ns);
    }
    // Without the fd if it cannot go: the report is what matters.
    if (sendmsg(control_fd, &header, MSG_NOSIGNAL) < 0 && ns >= 0) (void)send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
    if (ns >= 0) close(ns);
}

int xsb_control_wait_for(int control_fd, uint32_t type) {
    struct xsb_msg msg;
    ssize_t n;
    do {
        n = recv(control_fd, &msg, sizeof msg, 0);
    } while (n < 0 && errno == EINTR);
    return (n == (ssize_t)sizeof msg && msg.type == type) ? 0 : -1;
}

int xsb_control_serve_request(int control_fd, pid_t payload) {
    struct xsb_msg msg;
    ssize_t n = recv(control_fd, &msg, sizeof msg, 0);
    if (n == 0) return -1;
    if (n != (ssize_t)sizeof msg) return 0;
    int err = 0;
    switch (msg.type) {
    case XSB_MSG_SUSPEND:
        // The acknowledgement waits until every task is seen stopped.
        err = xsb_signals_stop_sandbox();                      // signals.c
        xsb_control_send(control_fd, XSB_MSG_ACK, XSB_MSG_SUSPEND, err);
        break;
    case XSB_MSG_RESUME:
        err = xsb_signals_continue_sandbox();                  // signals.c
        xsb_control_send(control_fd, XSB_MSG_ACK, XSB_MSG_RESUME, err);
        break;
    case XSB_MSG_SIGNAL:
        err = xsb_signals_to_payload(payload, msg.value);      // signals.c
        xsb_control_send(control_fd, XSB_MSG_ACK, XSB_MSG_SIGNAL, err);
        break;
    default:
        break;
    }
    return 0;
}
