// network.c's and cgroups.c's init sides, in namespaces of a forked child's own.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "forked_child.h"

/// The loopback device's flags, or -errno.
static int loopback_flags(void) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct ifreq ifr = {0};
    xsb_copy_string(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 ? (unsigned short)ifr.ifr_flags : -errno;
    close(fd);
    return rc;
}

static int name_host_body(const void *context, struct xsbt_outcome *out) {
    struct xsb_spawn_config cfg = {0};
    cfg.hostname = context;
    if (unshare(CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWNET) != 0) return -errno;
    out->values[0] = loopback_flags();
    xsb_init_name_host(&cfg, XSBT_FAIL_FD);
    xsb_init_bring_up_loopback(XSBT_FAIL_FD);
    out->values[1] = loopback_flags();
    struct utsname names;
    if (uname(&names) != 0) return -errno;
    xsbt_append(out->text, sizeof out->text, names.nodename);
    xsbt_append(out->text, sizeof out->text, " ");
    xsbt_append(out->text, sizeof out->text, names.domainname);
    return 0;
}

int xsbt_name_host(const char *hostname, struct xsbt_outcome *out) {
    return xsbt_run_forked(name_host_body, NULL, hostname, out);
}

static void append_cgroups(struct xsbt_outcome *out) {
    char text[1024];
    if (xsbt_read_text("/proc/self/cgroup", text, sizeof text) != 0) text[0] = '\0';
    xsbt_append(out->text, sizeof out->text, "==\n");
    xsbt_append(out->text, sizeof out->text, text);
}

static int join_body(const void *context, struct xsbt_outcome *out) {
    const char *tasks_path = context;
    struct xsb_spawn_config cfg = {0};
    for (int i = 0; i < 4; i++) cfg.cgroup_tasks_fds[i] = -1;
    if (tasks_path != NULL && (cfg.cgroup_tasks_fds[0] = open(tasks_path, O_WRONLY | O_CLOEXEC)) < 0) return -errno;
    append_cgroups(out);
    xsb_init_join_cgroups(&cfg, XSBT_FAIL_FD);
    append_cgroups(out);
    if (unshare(CLONE_NEWUSER) != 0) return -errno;
    xsb_init_enter_cgroup_namespace(XSBT_FAIL_FD);
    append_cgroups(out);
    return 0;
}

int xsbt_join_cgroups(const char *tasks_path, struct xsbt_outcome *out) {
    return xsbt_run_forked(join_body, NULL, tasks_path, out);
}
