// A bind source the supervisor opens for a sandbox: a root caller's sandbox runs as nobody on
// the host, which cannot traverse a 0700 directory on the way to a bundle, a container or a
// program the caller named. The supervisor, with the caller's rights, clones the mount tree
// at that path into a detached mount; the sandbox's init attaches it where the plan says
// (mounts.c), never looking the host path up itself.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xsb_supervisor_support.h"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef RESOLVE_NO_SYMLINKS
#define RESOLVE_NO_SYMLINKS 0x04
#endif

struct detached_open_how {
    uint64_t flags, mode, resolve;
};
struct detached_mount_attr {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

int xsb_detached_tree(const char *path) {
    struct detached_open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS};
    int source = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (source < 0) return -errno;
    int tree = (int)syscall(SYS_open_tree, source, "", OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
    int err = errno;
    close(source);
    if (tree < 0) return -err;
    // A clone of a shared mount joins its peer group: the init's mounts below it would then
    // appear on the host. Private, recursively, before anyone else sees it.
    struct detached_mount_attr attr = {.propagation = MS_PRIVATE};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0) {
        err = errno;
        close(tree);
        return -err;
    }
    return tree;
}
