#define _GNU_SOURCE
#include "xsb_fuse_support.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

// Room for any request the kernel may send first: it refuses a read into less.
#define READ_BUFFER_SIZE (FUSE_MIN_READ_BUFFER + (1 << 20))

int xsb_fuse_hang_mount(const char *directory, const char **step) {
    *step = "open /dev/fuse";
    int fuse = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fuse < 0) return -errno;
    char options[128];
    snprintf(options, sizeof options, "fd=%d,rootmode=40000,user_id=%u,group_id=%u", fuse, (unsigned)getuid(), (unsigned)getgid());
    *step = "mount";
    if (mount("xsb-hang", directory, "fuse", MS_NOSUID | MS_NODEV, options) != 0) {
        int failure = errno;
        close(fuse);
        return -failure;
    }
    // The kernel sends INIT on its own after the mount; answer it, and never anything else.
    int failure = 0;
    char *buffer = malloc(READ_BUFFER_SIZE);
    struct pollfd readable = {.fd = fuse, .events = POLLIN};
    *step = "wait for FUSE_INIT";
    int ready = poll(&readable, 1, 5000);
    if (ready <= 0) failure = ready == 0 ? ETIMEDOUT : errno;
    ssize_t count = 0;
    if (!failure) {
        *step = "read FUSE_INIT";
        count = read(fuse, buffer, READ_BUFFER_SIZE);
        if (count < 0) failure = errno;
        // Older kernels send the first four fields only (major, minor, max_readahead, flags).
        else if ((size_t)count < sizeof(struct fuse_in_header) + 4 * sizeof(uint32_t)) failure = EPROTO;
    }
    if (!failure) {
        struct fuse_in_header in;
        memcpy(&in, buffer, sizeof in);
        struct fuse_init_in init;
        memset(&init, 0, sizeof init);
        size_t sent = (size_t)count - sizeof in;
        memcpy(&init, buffer + sizeof in, sent < sizeof init ? sent : sizeof init);
        if (in.opcode != FUSE_INIT) failure = EPROTO;
        struct {
            struct fuse_out_header header;
            struct fuse_init_out init;
        } reply;
        memset(&reply, 0, sizeof reply);
        reply.header.len = sizeof reply;
        reply.header.unique = in.unique;
        reply.init.major = FUSE_KERNEL_VERSION;
        reply.init.minor = FUSE_KERNEL_MINOR_VERSION;
        reply.init.max_readahead = init.max_readahead;
        reply.init.max_background = 1;
        reply.init.congestion_threshold = 1;
        reply.init.max_write = 4096;
        reply.init.time_gran = 1;
        *step = "answer FUSE_INIT";
        if (!failure && write(fuse, &reply, sizeof reply) != (ssize_t)sizeof reply) failure = errno ? errno : EIO;
    }
    free(buffer);
    if (failure) {
        xsb_fuse_hang_abort(directory, fuse);
        return -failure;
    }
    return fuse;
}

int xsb_fuse_hang_wait_request(int fuse, int timeout_ms) {
    struct pollfd readable = {.fd = fuse, .events = POLLIN};
    int ready = poll(&readable, 1, timeout_ms);
    if (ready < 0) return -errno;
    return ready > 0 && (readable.revents & POLLIN) ? 1 : 0;
}

/// The connection's number under /sys/fs/fuse/connections: the mount's device minor, read from
/// mountinfo (a stat of the mount point would itself wait for the file system). -1: not found.
static long connection_of(const char *directory) {
    FILE *mounts = fopen("/proc/self/mountinfo", "re");
    if (!mounts) return -1;
    long found = -1;
    char *line = NULL;
    size_t capacity = 0;
    while (getline(&line, &capacity, mounts) > 0) {
        unsigned major, minor;
        char point[4096];
        // id parent major:minor root mount-point ...
        if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &major, &minor, point) == 3 && strcmp(point, directory) == 0
            && strstr(line, " - fuse ") != NULL) {
            found = minor;  // the last one mounted there
        }
    }
    free(line);
    fclose(mounts);
    return found;
}

void xsb_fuse_hang_abort(const char *directory, int fuse) {
    long connection = connection_of(directory);
    if (connection >= 0) {
        char path[96];
        snprintf(path, sizeof path, "/sys/fs/fuse/connections/%ld/abort", connection);
        int abort = open(path, O_WRONLY | O_CLOEXEC);
        if (abort >= 0) {
            (void)!write(abort, "1", 1);
            close(abort);
        }
    }
    umount2(directory, MNT_DETACH);
    // Closing the last descriptor of the connection aborts it too, where sysfs was not there.
    close(fuse);
}
