// Supervisor side of seccomp user notifications: a "kill" action in the filter becomes a
// notification, so the supervisor learns the syscall's number before it kills the sandbox.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/seccomp.h>
#include <string.h>
#include <sys/ioctl.h>

#include "xsb_shim.h"

int xsb_notify_receive(int notify_fd, int *syscall_nr, uint32_t *arch, pid_t *pid,
                       uint64_t *notification_id) {
    struct seccomp_notif req;
    // The kernel insists on a zeroed request.
    memset(&req, 0, sizeof req);
    if (ioctl(notify_fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) return -errno;
    *syscall_nr = req.data.nr;
    *arch = req.data.arch;
    *pid = (pid_t)req.pid;
    *notification_id = req.id;
    return 0;
}

int xsb_notify_continue(int notify_fd, uint64_t notification_id) {
    struct seccomp_notif_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.id = notification_id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    if (ioctl(notify_fd, SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0) return -errno;
    return 0;
}
