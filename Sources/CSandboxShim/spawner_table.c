// The spawner thread's own fd table. A clone copies the cloning thread's fd table into the
// child, and the child then closes what it does not pass on: with the host's table, that is a
// copy and a close of every fd the host holds (2–3 per running sandbox, so the cost of a
// launch grew with the number running: about 3.5% of the machine's CPU at 1,000 alive), and
// every host fd is in the child until it closes them. So the spawner thread unshares its table
// once and keeps only its inbox there; each launch hands it just the fds that launch passes on
// (SCM_RIGHTS), and gets the sandbox's control socket and pidfd back the same way over a
// socket pair of its own. Runs on the spawner thread and on the launching thread (no child).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

/// Closes every fd above 2 of the calling thread's table except `keep`. 0 or -errno.
static int close_all_but(int keep) {
    if (keep > 3 && syscall(SYS_close_range, 3U, (unsigned)keep - 1, 0) != 0) return -errno;
    if (syscall(SYS_close_range, (unsigned)(keep >= 3 ? keep + 1 : 3), ~0U, 0) != 0) return -errno;
    return 0;
}

int xsb_spawner_table_make_private(int inbox) {
    if (unshare(CLONE_FILES) != 0) return -errno;
    int rc = close_all_but(inbox);
    if (rc != 0) return rc;
    // 0, 1 and 2 become /dev/null here (the host's own could be a pipe this table must not keep
    // open), so that what a launch hands over never lands on them: the launch code takes 0–2
    // for the payload's standard streams.
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) return -errno;
    for (int fd = 0; fd < 3; fd++) {
        if (fd != inbox && fd != null && dup3(null, fd, O_CLOEXEC) < 0) {
            rc = -errno;
            break;
        }
    }
    if (null > 2) close(null);
    return rc;
}

void xsb_spawner_table_clear(int inbox) { (void)close_all_but(inbox); }

/// The addresses of `cfg`'s fd fields, in the order of a hand-over; the extra fds and the
/// detached mounts are read from `extra` and `trees` (copies the caller owns). Returns how many.
static size_t fd_fields(struct xsb_spawn_config *cfg, int *extra, int *trees, int *fields[]) {
    size_t n = 0;
    fields[n++] = &cfg->init_fd;
    fields[n++] = &cfg->cgroup_directory_fd;
    for (int i = 0; i < 3; i++) fields[n++] = &cfg->stdio[i];
    for (int i = 0; i < 4; i++) fields[n++] = &cfg->cgroup_tasks_fds[i];
    for (size_t i = 0; i < cfg->extra_fd_count; i++) fields[n++] = &extra[i];
    fields[n++] = &cfg->exec_fd;
    for (size_t i = 0; i < cfg->mount_tree_count; i++) fields[n++] = &trees[i];
    return n;
}

int xsb_spawner_list_fds(const struct xsb_spawn_config *cfg, int out[XSB_SPAWNER_MAX_FDS]) {
    if (cfg->extra_fd_count > XSB_MAX_EXTRA_FDS || cfg->mount_tree_count > XSB_MAX_MOUNT_TREES) return -EMFILE;
    struct xsb_spawn_config copy = *cfg;
    int extra[XSB_MAX_EXTRA_FDS], trees[XSB_MAX_MOUNT_TREES];
    for (size_t i = 0; i < cfg->extra_fd_count; i++) extra[i] = cfg->extra_fds[i];
    for (size_t i = 0; i < cfg->mount_tree_count; i++) trees[i] = cfg->mount_trees[i];
    int *fields[XSB_SPAWNER_MAX_FDS];
    size_t count = fd_fields(&copy, extra, trees, fields);
    int listed = 0;
    for (size_t i = 0; i < count; i++)
        if (*fields[i] >= 0) out[listed++] = *fields[i];
    return listed;
}

/// Sends `count` fds (SCM_RIGHTS) with their count as the int32 body. 0 or -errno.
static int send_fds(int socket_fd, const int *fds, int32_t count) {
    union {
        char buffer[CMSG_SPACE(sizeof(int) * (XSB_SPAWNER_MAX_FDS + 1))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {.iov_base = &count, .iov_len = sizeof count};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buffer,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)count);
    for (;;) {
        ssize_t n = sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof count) return 0;
        if (n < 0 && errno == EINTR) continue;
        return n < 0 ? -errno : -EIO;
    }
}

int xsb_spawner_hand_over(int outbox, const int *fds, int count, int reply) {
    if (count < 0 || count > XSB_SPAWNER_MAX_FDS) return -EMFILE;
    int all[XSB_SPAWNER_MAX_FDS + 1];
    all[0] = reply;
    for (int i = 0; i < count; i++) all[i + 1] = fds[i];
    return send_fds(outbox, all, count + 1);
}

/// Receives one SCM_RIGHTS message of at most `capacity` fds into `fds`, with its int32 body
/// in `*body`. Returns the number of fds, or -errno (-EBADMSG: truncated or malformed). Every
/// fd received is close-on-exec.
static int receive_fds(int socket_fd, int32_t *body, int *fds, int capacity) {
    union {
        char buffer[CMSG_SPACE(sizeof(int) * (XSB_SPAWNER_MAX_FDS + 1))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = body, .iov_len = sizeof *body};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buffer,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)capacity)};
    ssize_t n;
    do {
        n = recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    int count = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int in = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < in; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof fd);
            if (count < capacity) fds[count++] = fd;
            else close(fd);
        }
    }
    if (n != (ssize_t)sizeof *body || (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
        for (int i = 0; i < count; i++) close(fds[i]);
        // The kernel truncates the fds it cannot install: the table is full.
        return (msg.msg_flags & MSG_CTRUNC) ? -EMFILE : -EBADMSG;
    }
    return count;
}

int xsb_spawner_take_over(int inbox, int expected, struct xsb_spawner_fds *storage) {
    storage->reply = -1;
    storage->count = 0;
    int32_t handed = 0;
    int fds[XSB_SPAWNER_MAX_FDS + 1];
    int received = receive_fds(inbox, &handed, fds, XSB_SPAWNER_MAX_FDS + 1);
    if (received < 0) return received;
    if (received != expected + 1 || handed != received) {
        // Not this launch's: the hand-overs and the jobs went out of step. Fail closed.
        for (int i = 0; i < received; i++) close(fds[i]);
        return -EPROTO;
    }
    storage->reply = fds[0];
    for (int i = 1; i < received; i++) storage->received[storage->count++] = fds[i];
    return 0;
}

int xsb_spawner_apply(struct xsb_spawn_config *cfg, struct xsb_spawner_fds *storage) {
    if (cfg->extra_fd_count > XSB_MAX_EXTRA_FDS || cfg->mount_tree_count > XSB_MAX_MOUNT_TREES) return -EMFILE;
    for (size_t i = 0; i < cfg->extra_fd_count; i++) storage->extra[i] = cfg->extra_fds[i];
    for (size_t i = 0; i < cfg->mount_tree_count; i++) storage->trees[i] = cfg->mount_trees[i];
    int *fields[XSB_SPAWNER_MAX_FDS];
    size_t count = fd_fields(cfg, storage->extra, storage->trees, fields);
    int next = 0;
    for (size_t i = 0; i < count; i++) {
        if (*fields[i] < 0) continue;
        if (next >= storage->count) return -EPROTO;
        *fields[i] = storage->received[next++];
    }
    if (next != storage->count) return -EPROTO;
    cfg->extra_fds = storage->extra;
    cfg->mount_trees = storage->trees;
    return 0;
}

int xsb_spawner_send_result(int reply, const struct xsb_spawn_result *out) {
    int fds[2] = {out->control_fd, out->pidfd};
    return send_fds(reply, fds, 2);
}

int xsb_spawner_receive_result(int reply, struct xsb_spawn_result *out) {
    int32_t handed = 0;
    int fds[2];
    int received = receive_fds(reply, &handed, fds, 2);
    if (received < 0) return received;
    if (received != 2 || handed != 2) {
        for (int i = 0; i < received; i++) close(fds[i]);
        return -EPROTO;
    }
    out->control_fd = fds[0];
    out->pidfd = fds[1];
    return 0;
}
