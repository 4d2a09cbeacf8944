// A container's file system image, mounted by the (root) supervisor as a detached mount: a
// loop device over the image (LO_FLAGS_AUTOCLEAR: the device frees itself once nothing holds
// it), an ext4 mount of it with fsopen/fsmount that no mount namespace contains, and clones of
// that mount placed at a path only for the moment a launch needs one.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xsb_supervisor_support.h"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif

static int attach_loop(int image_fd, char *device, size_t size) {
    int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (control < 0) return -errno;
    // Another process may take the free device between the two calls: try again.
    for (int attempt = 0; attempt < 16; attempt++) {
        int number = ioctl(control, LOOP_CTL_GET_FREE);
        if (number < 0) { int e = errno; close(control); return -e; }
        snprintf(device, size, "/dev/loop%d", number);
        int loop = open(device, O_RDWR | O_CLOEXEC);
        if (loop < 0) continue;
        struct loop_config config;
        memset(&config, 0, sizeof config);
        config.fd = (unsigned int)image_fd;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        if (ioctl(loop, LOOP_CONFIGURE, &config) == 0) { close(control); return loop; }
        int e = errno;
        close(loop);
        if (e != EBUSY) { close(control); return -e; }
    }
    close(control);
    return -EBUSY;
}

int xsb_volume_mount(int image_fd) {
    char device[32];
    int loop = attach_loop(image_fd, device, sizeof device);
    if (loop < 0) return loop;
    int result;
    int fs = (int)syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
    if (fs < 0) { result = -errno; goto out; }
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", device, 0) < 0
        || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "errors", "remount-ro", 0) < 0
        || syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
        result = -errno;
        close(fs);
        goto out;
    }
    result = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (result < 0) result = -errno;
    close(fs);
out:
    // The mount holds the device from now on; without one, this close frees it (autoclear).
    close(loop);
    return result;
}

int xsb_volume_place(int mount_fd, const char *path) {
    int clone = (int)syscall(SYS_open_tree, mount_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    if (clone < 0) return -errno;
    int result = 0;
    if (syscall(SYS_move_mount, clone, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) < 0) result = -errno;
    close(clone);
    return result;
}
