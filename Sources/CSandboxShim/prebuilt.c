// Pre-built sandboxes, both sides. A pre-built sandbox is cloned and built like any other
// (spawn.c, init.c) up to its shape: namespaces, ids, cgroups, hostname, loopback, file system.
// Its init then reports XSB_MSG_PREBUILT and waits; a launch hands it what is per launch (the
// launch part, launch_description.c, and its fds) in one XSB_MSG_LAUNCH, and the init goes on
// exactly as a cold launch does. It runs one payload, ever: there is no second LAUNCH.
//
// A launch part of at most XSB_LAUNCH_PART_INLINE_MAX bytes travels inside the LAUNCH message
// (value XSB_LAUNCH_PART_INLINE), which spares the launching thread a memfd and the init its
// mapping; a larger one is a sealed memfd passed first among the fds (value 0).
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "child.h"

/// The most fds one LAUNCH carries: the launch part, stdio, the extra fds and the program.
#define XSB_LAUNCH_MAX_FDS (1 + 3 + XSB_MAX_EXTRA_FDS + 1)
/// XSB_MSG_LAUNCH's value when the launch part follows the message in the same datagram.
#define XSB_LAUNCH_PART_INLINE 1

// MARK: - Supervisor side

static int launch_failed(struct xsb_spawn_result *out, int step, int err, const char *detail) {
    out->failed_step = step;
    out->error_number = err;
    xsb_copy_string(out->detail, sizeof out->detail, detail);
    return -1;
}

/// Sends one LAUNCH: the part inside it (`part` < 0: `blob`, `size` bytes) or as the memfd
/// `part`, then the launch's fds. Returns 0, or the send's errno (nothing is sent then: a
/// datagram goes whole or not at all).
static int send_launch(int control_fd, const char *blob, uint64_t size, int part, const struct xsb_passed_fds *passed) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = XSB_MSG_LAUNCH;
    msg.value = part < 0 ? XSB_LAUNCH_PART_INLINE : 0;
    struct iovec iov[2] = {{.iov_base = &msg, .iov_len = sizeof msg}, {.iov_base = (void *)blob, .iov_len = part < 0 ? (size_t)size : 0}};
    int fds[XSB_LAUNCH_MAX_FDS];
    int count = 0;
    if (part >= 0) fds[count++] = part;
    for (int i = 0; i < passed->count; i++) fds[count++] = passed->host[i];
    union {
        char buf[CMSG_SPACE(sizeof(int) * XSB_LAUNCH_MAX_FDS)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr header = {.msg_iov = iov, .msg_iovlen = part < 0 ? 2 : 1};
    if (count > 0) {
        header.msg_control = control.buf;
        header.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count);
        struct cmsghdr *c = CMSG_FIRSTHDR(&header);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)count);
    }
    ssize_t n;
    do {
        n = sendmsg(control_fd, &header, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return errno;
    return n == (ssize_t)(sizeof msg + iov[1].iov_len) ? 0 : EIO;
}

int xsb_prebuilt_launch(int control_fd, const struct xsb_spawn_config *cfg, struct xsb_spawn_result *out) {
    struct xsb_passed_fds passed;
    char *blob;
    uint64_t size;
    if (xsb_launch_part_write(cfg, &passed, &blob, &size) != 0)
        return launch_failed(out, XSB_STEP_LAUNCH_DESCRIPTION, errno, "writing the launch part");
    // Inside the message when it fits; a socket whose buffer is too small for it (a small
    // net.core.wmem_default) or short of memory refuses the whole datagram, and the part goes
    // as a memfd instead, as a larger one does.
    int err = size <= XSB_LAUNCH_PART_INLINE_MAX ? send_launch(control_fd, blob, size, -1, &passed) : EMSGSIZE;
    if (err == EMSGSIZE || err == ENOBUFS || err == ENOMEM) {
        int part = -1;
        int rc = xsb_launch_part_seal(blob, size, &part);  // frees the blob
        blob = NULL;
        if (rc != 0) return launch_failed(out, XSB_STEP_LAUNCH_DESCRIPTION, errno, "writing the launch part (memfd)");
        err = send_launch(control_fd, NULL, 0, part, &passed);
        close(part);
    }
    free(blob);
    if (err != 0) return launch_failed(out, XSB_STEP_HANDSHAKE, err, "handing the launch to the pre-built sandbox");
    out->prebuilt = 0;
    return 0;
}

// MARK: - Init side

void xsb_init_await_launch(struct xsb_spawn_config *cfg, int control_fd, const int *also_keep, size_t also_count) {
    // What built the shape (cgroup `tasks` files, detached mounts) is done with: while it waits,
    // the init holds its control socket only (and a waiting payload's fds).
    int keep[1 + XSB_WAITING_PAYLOAD_MAX_FDS];
    size_t kept = 0;
    keep[kept++] = control_fd;
    for (size_t i = 0; i < also_count && i < XSB_WAITING_PAYLOAD_MAX_FDS; i++) keep[kept++] = also_keep[i];
    xsb_init_keep_only(control_fd, keep, kept);                       // fds.c
    cfg->cgroup_tasks_fds[0] = cfg->cgroup_tasks_fds[1] = cfg->cgroup_tasks_fds[2] = cfg->cgroup_tasks_fds[3] = -1;
    cfg->mount_tree_count = 0;
    xsb_control_send(control_fd, XSB_MSG_PREBUILT, 0, 0);            // control.c
    if (cfg->waiting_payload) xsb_waiting_payload_idle(control_fd);   // waiting_payload.c

    // Where a launch part sent inside the message lands, and stays while the launch runs
    // (whole pages: xsb_description_unload gives them back once the payload runs).
    static char inline_part[XSB_LAUNCH_PART_INLINE_MAX] __attribute__((aligned(4096)));
    struct xsb_msg msg;
    struct iovec iov[2] = {{.iov_base = &msg, .iov_len = sizeof msg}, {.iov_base = inline_part, .iov_len = sizeof inline_part}};
    union {
        char buf[CMSG_SPACE(sizeof(int) * XSB_LAUNCH_MAX_FDS)];
        struct cmsghdr align;
    } control;
    struct msghdr header = {.msg_iov = iov, .msg_iovlen = 2, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    ssize_t n;
    do {
        n = recvmsg(control_fd, &header, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    // The supervisor let go of it (the pool drained, the host ending): nothing ran here.
    if (n == 0) _exit(0);
    if (n < 0) xsb_init_fail(control_fd, XSB_STEP_LAUNCH_DESCRIPTION, errno, "launch description: the launch message");
    int fds[XSB_LAUNCH_MAX_FDS];
    int count = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&header); c != NULL; c = CMSG_NXTHDR(&header, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int in = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < in && count < XSB_LAUNCH_MAX_FDS; i++) memcpy(&fds[count++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    int well_formed = n >= (ssize_t)sizeof msg && msg.type == XSB_MSG_LAUNCH && (header.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) == 0;
    int inline_sent = well_formed && msg.value == XSB_LAUNCH_PART_INLINE;
    // Inline: the part follows the message, every fd is the launch's. Else: nothing follows,
    // and the part is the first fd.
    if (!well_formed || (inline_sent ? n == (ssize_t)sizeof msg : (msg.value != 0 || n != (ssize_t)sizeof msg || count < 1)))
        xsb_init_fail(control_fd, XSB_STEP_LAUNCH_DESCRIPTION, EPROTO, "launch description: the launch message");
    const char *refused = NULL;
    int rc = inline_sent ? xsb_launch_part_load_bytes(inline_part, (uint64_t)n - sizeof msg, fds, count, cfg, &refused)  // launch_description.c
                         : xsb_launch_part_load(fds[0], fds + 1, count - 1, cfg, &refused);
    if (rc != 0) xsb_init_fail(control_fd, XSB_STEP_LAUNCH_DESCRIPTION, errno, refused);
    if (inline_sent) xsb_launch_part_received(inline_part, (uint64_t)n - sizeof msg);
    else close(fds[0]);  // the mapping stays
}
