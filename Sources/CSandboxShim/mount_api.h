// What mounts.c and masks.c share: the mount API's constants (from linux/mount.h and
// linux/openat2.h, which clash with glibc 2.36's <sys/mount.h>), the staging root's paths, and
// the primitives that make a mount point and attach a detached mount without following a symlink.
#ifndef XSB_MOUNT_API_H
#define XSB_MOUNT_API_H

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "child.h"

#define XSB_MOUNT_ATTR_RDONLY 0x00000001
#define XSB_MOUNT_ATTR_NOSUID 0x00000002
#define XSB_MOUNT_ATTR_NODEV 0x00000004
#define XSB_MOUNT_ATTR_NOEXEC 0x00000008
#define XSB_AT_RECURSIVE 0x8000
#define XSB_OPEN_TREE_CLONE 1
#define XSB_MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#define XSB_MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#define XSB_FSOPEN_CLOEXEC 0x00000001
#define XSB_FSMOUNT_CLOEXEC 0x00000001
#define XSB_FSCONFIG_SET_STRING 1
#define XSB_FSCONFIG_CMD_CREATE 6
#define XSB_FSCONFIG_CMD_RECONFIGURE 7
#define XSB_FSPICK_CLOEXEC 0x00000001
#define XSB_FSPICK_EMPTY_PATH 0x00000008
#define XSB_RESOLVE_NO_SYMLINKS 0x04

struct xsb_mount_attr {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};
struct xsb_open_how {
    uint64_t flags, mode, resolve;
};

#define OLD "/oldroot"
#define NEW "/newroot"
#define PATH_SIZE 4096

/// Closes `fd` and returns -1, leaving errno as it was.
static inline int xsb_close_keeping_errno(int fd) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

/// Creates (if needed) and opens the mount point `leaf` in the directory `parent`.
int xsb_mount_point_in(int parent, const char *leaf, int directory);
/// Creates (if needed) and opens the exact mount point `target` below `root`.
int xsb_mount_point(int root, const char *target, int directory);
/// Attaches the detached mount `mount_fd` onto the mount point `point`.
int xsb_mount_attach(int mount_fd, int point);
/// Gives the detached mount `tree` (and every mount below it) a bind's attributes.
int xsb_mount_set_bind_attributes(int tree, int flags);
/// Gives the detached mount `tree` a bind's attributes and attaches it at `target` below
/// `root`; closes `tree`. On failure `*at_target` tells whether the mount point was the problem.
int xsb_mount_attach_bind(int root, int tree, const char *target, int flags, int *at_target);
/// Host path `source` (a real path: no symlink on the way), opened `O_PATH`.
int xsb_mount_host_source(const char *source);
/// A detached recursive copy of host path `source` (a real path: no symlink on the way).
int xsb_mount_host_tree(const char *source);

/// Whether a mask lies below the bind `op` (masks.c): then it is bound back entry by entry.
int xsb_masks_below(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op);
/// The directory bind `op`, which has masks below it, bound back entry by entry, so that no
/// mount on a masked path sits on a host dentry (masks.c). Reports a failure on `control_fd`.
int xsb_masks_bind(int root, const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, int control_fd);

#endif
