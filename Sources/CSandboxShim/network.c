// The sandbox's network and host names: a new network namespace (no interface but a loopback
// device, which starts down) and a new UTS namespace with the policy's hostname.
#define _GNU_SOURCE
#include <errno.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "child.h"

void xsb_init_name_host(const struct xsb_spawn_config *cfg, int control_fd) {
    if (sethostname(cfg->hostname, xsb_string_length(cfg->hostname)) != 0) xsb_init_fail(control_fd, XSB_STEP_HOSTNAME, errno, cfg->hostname);
    if (setdomainname("none", 4) != 0) xsb_init_fail(control_fd, XSB_STEP_HOSTNAME, errno, "domainname");
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

void xsb_init_bring_up_loopback(int control_fd) {
    if (bring_up_loopback() != 0) xsb_init_fail(control_fd, XSB_STEP_LOOPBACK, errno, "lo");
}
