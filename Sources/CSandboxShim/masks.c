// Masks that the host cannot detach from outside (the policy's `mask`): the bind above a mask,
// bound back entry by entry. mounts.c places the masks themselves, and calls xsb_masks_bind for
// a bind with a mask below it.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"
#include "mount_api.h"

// Why: a mount sits on a dentry; when the host
// unlinks or renames over that dentry, the kernel detaches every mount on it in every mount
// namespace, and a rename of it (or of a directory above it) carries the mount along. A mask
// placed on a host file through a bind of its parent would then uncover the new file, or leave
// the path bare, in a running sandbox. So a bind with a mask below it is not mounted whole: its
// target and each directory on the way down to a mask (or to any other mount below it) become
// directories of the sandbox's root tmpfs, and every other entry of the host directory is bound
// back on its own, with the bind's attributes. Every mount point on a masked path is then a
// dentry of the sandbox's own file system: a host rename detaches nothing there (a bound-back
// file keeps showing the file it was), and entries the host adds later do not appear.

/// A host directory on the way to a mask may have at most this many entries: each is a mount of
/// its own, and a directory too large to bind back entry by entry fails the launch rather than
/// leaving the mask detachable.
#define XSB_MASKED_DIRECTORY_LIMIT 4096
#define XSB_TEXT(x) #x
#define XSB_NUMBER_TEXT(x) XSB_TEXT(x)

/// Where the source of a bind with masks below it is attached while it is bound back entry by
/// entry: a directory of the staging root, outside the new root.
#define SPLIT_SOURCE_NAME "xsb-split-source"
#define SPLIT_SOURCE "/" SPLIT_SOURCE_NAME

/// At most this many names of one host directory may be masked or lie on the way to a mask:
/// each is looked up before the directory is bound back.
#define XSB_MASKED_NAMES_LIMIT 256

/// The host file that a masked name (or one on the way to a mask) of the directory being bound
/// back opens. An entry listed under another name that opens the same file (another spelling on
/// a case-insensitive file system, a hard link, a bind mount of it) would show what the mask hides.
struct masked_file {
    dev_t device;
    ino_t inode;
    const char *target;  ///< an operation's target through this name
    size_t length;       ///< of the masked name's path: `target`'s first `length` bytes
};

struct split {
    int root;
    const struct xsb_spawn_config *cfg;
    int flags;                   ///< the bind's flags, for each bound-back entry
    char path[PATH_SIZE];        ///< the path inside being built (on failure: the one that failed)
    size_t length;
    char link[PATH_SIZE];        ///< a symlink's text being recreated
    const struct masked_file *masked;  ///< the masked names of the directory being bound back
    size_t masked_count;
    char reached[PATH_SIZE];     ///< on failure, the masked path an entry reached under another name
};

/// Whether `path` lies strictly below the directory `dir` (both normalized and absolute).
static int is_below(const char *path, const char *dir) {
    size_t n = xsb_string_length(dir);
    for (size_t i = 0; i < n; i++)
        if (path[i] != dir[i]) return 0;
    return path[n] == '/';
}

static int same_path(const char *a, const char *b) {
    while (*a != '\0' && *a == *b) a++, b++;
    return *a == *b;
}

/// Whether a mask lies below the bind `op`: then it is bound back entry by entry (split_bind).
int xsb_masks_below(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op) {
    if (op->kind != XSB_MOUNT_BIND || !(op->flags & XSB_MOUNT_F_DIRECTORY)) return 0;
    for (size_t i = 0; i < cfg->mount_count; i++)
        if (cfg->mounts[i].kind == XSB_MOUNT_MASK && is_below(cfg->mounts[i].target, op->target)) return 1;
    return 0;
}

/// Whether a later bind of the same target covers the bind `op` whole (a later bind of a path
/// wins): bound back entry by entry, `op` would only lie under it, and in its way.
static int bound_again_later(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op) {
    for (const struct xsb_mount_op *later = op + 1; later < cfg->mounts + cfg->mount_count; later++)
        if (later->kind == XSB_MOUNT_BIND && same_path(later->target, op->target)) return 1;
    return 0;
}

/// Records what each name directly in `s->path` that is masked, or on the way to a mask, opens
/// in `host_dir`, found by the kernel's own lookup: the entries bound back are then compared with
/// these files, not only with the names' bytes. (Another name of what another mount replaces
/// shows only what the whole bind would have shown.)
static int find_masked_files(const struct split *s, int host_dir, struct masked_file *files, size_t *count) {
    *count = 0;
    for (size_t i = 0; i < s->cfg->mount_count; i++) {
        const char *target = s->cfg->mounts[i].target;
        if (s->cfg->mounts[i].kind != XSB_MOUNT_MASK || !is_below(target, s->path)) continue;
        size_t start = s->length + 1, end = start;
        while (target[end] != '\0' && target[end] != '/') end++;
        char name[256];
        if (end - start >= sizeof name) continue;  // no host entry has so long a name
        int seen = 0;
        for (size_t k = 0; k < *count && !seen; k++) {
            if (files[k].length != end) continue;
            seen = 1;
            for (size_t b = start; b < end; b++)
                if (files[k].target[b] != target[b]) seen = 0;
        }
        if (seen) continue;
        for (size_t b = start; b < end; b++) name[b - start] = target[b];
        name[end - start] = '\0';
        struct stat st;
        if (fstatat(host_dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) continue;  // nothing to reach
            return -1;
        }
        if (*count == XSB_MASKED_NAMES_LIMIT) {
            errno = EOVERFLOW;
            return -1;
        }
        files[(*count)++] = (struct masked_file){.device = st.st_dev, .inode = st.st_ino, .target = target, .length = end};
    }
    return 0;
}

/// 1: another operation makes `path` (it is left out); 2: one makes something below it (it
/// becomes a directory of the root, bound back entry by entry); 0: neither (it is bound back).
static int planned_at(const struct xsb_spawn_config *cfg, const char *path) {
    int below = 0;
    for (size_t i = 0; i < cfg->mount_count; i++) {
        if (same_path(cfg->mounts[i].target, path)) return 1;
        if (is_below(cfg->mounts[i].target, path)) below = 2;
    }
    return below;
}

/// Binds back the host entry `name` of `host_dir` into `dir` (the root's directory at the
/// entry's parent): a file or directory as a bind of its own, a symlink recreated; sockets,
/// device nodes and FIFOs are left out (the bind's nodev leaves device nodes unusable anyway).
static int bind_back_entry(struct split *s, int host_dir, int dir, const char *name, unsigned char type) {
    if (type == DT_UNKNOWN) {
        struct stat st;
        if (fstatat(host_dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : S_ISLNK(st.st_mode) ? DT_LNK : DT_SOCK;
    }
    if (type == DT_LNK) {
        ssize_t n = readlinkat(host_dir, name, s->link, sizeof s->link);
        if (n < 0) return -1;
        if ((size_t)n >= sizeof s->link) {
            errno = ENAMETOOLONG;
            return -1;
        }
        s->link[n] = '\0';
        return symlinkat(s->link, dir, name);
    }
    if (type != DT_DIR && type != DT_REG) return 0;
    int tree = (int)syscall(SYS_open_tree, host_dir, name, XSB_OPEN_TREE_CLONE | O_CLOEXEC | AT_SYMLINK_NOFOLLOW | XSB_AT_RECURSIVE);
    if (tree < 0) return -1;
    // What was opened decides, not the listing: the host may have replaced the entry meanwhile.
    struct stat st;
    if (fstat(tree, &st) != 0) return xsb_close_keeping_errno(tree);
    for (size_t k = 0; k < s->masked_count; k++) {
        if (s->masked[k].device == st.st_dev && s->masked[k].inode == st.st_ino) {
            xsb_copy_string(s->reached, s->masked[k].length + 1 < sizeof s->reached ? s->masked[k].length + 1 : sizeof s->reached,
                            s->masked[k].target);
            close(tree);
            errno = EINVAL;
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
        close(tree);
        return 0;
    }
    int flags = (s->flags & ~XSB_MOUNT_F_DIRECTORY) | (S_ISDIR(st.st_mode) ? XSB_MOUNT_F_DIRECTORY : 0);
    // The mount point is made in `dir` itself: no walk from the root for each entry.
    int point = xsb_mount_set_bind_attributes(tree, flags) == 0 ? xsb_mount_point_in(dir, name, S_ISDIR(st.st_mode)) : -1;
    int rc = point < 0 ? -1 : xsb_mount_attach(tree, point);
    if (point >= 0) xsb_close_keeping_errno(point);
    xsb_close_keeping_errno(tree);
    return rc;
}

/// Makes `s->path` a directory of the root with the entries of `host_dir` bound back, except
/// what other operations make (masks among them), and directories on the way to those, which
/// are made the same way.
static int bind_back_directory(struct split *s, int host_dir) {
    int point = xsb_mount_point(s->root, s->path, 1);
    if (point < 0) return -1;
    int dir = openat(point, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    xsb_close_keeping_errno(point);
    if (dir < 0) return -1;
    struct masked_file masked[XSB_MASKED_NAMES_LIMIT];
    size_t masked_count;
    if (find_masked_files(s, host_dir, masked, &masked_count) != 0) return xsb_close_keeping_errno(dir);
    char entries[2048] __attribute__((aligned(8)));
    size_t count = 0, length = s->length;
    long n;
    while ((n = syscall(SYS_getdents64, host_dir, entries, sizeof entries)) > 0) {
        for (long at = 0; at < n;) {
            // glibc's dirent64 has the kernel's linux_dirent64 layout.
            const struct dirent64 *d = (const struct dirent64 *)(entries + at);
            at += d->d_reclen;
            const char *name = d->d_name;
            if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
            if (++count > XSB_MASKED_DIRECTORY_LIMIT) {
                errno = E2BIG;
                return xsb_close_keeping_errno(dir);
            }
            size_t name_length = xsb_string_length(name);
            if (length + 1 + name_length >= sizeof s->path) {
                errno = ENAMETOOLONG;
                return xsb_close_keeping_errno(dir);
            }
            s->path[length] = '/';
            xsb_copy_string(s->path + length + 1, sizeof s->path - length - 1, name);
            s->length = length + 1 + name_length;
            int planned = planned_at(s->cfg, s->path);
            int rc = 0;
            if (planned == 2) {
                // A symlink here refuses (ENOTDIR), as a mount point behind one is refused.
                int sub = openat(host_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                rc = sub < 0 ? -1 : bind_back_directory(s, sub);
                if (sub >= 0) xsb_close_keeping_errno(sub);
            } else if (planned == 0) {
                s->masked = masked;
                s->masked_count = masked_count;
                rc = bind_back_entry(s, host_dir, dir, name, d->d_type);
            }
            if (rc != 0) return xsb_close_keeping_errno(dir);
            s->path[length] = '\0';
            s->length = length;
        }
    }
    // The directory keeps the host's permission bits (the root is read-only before anything runs).
    struct stat st;
    int rc = n < 0 || fstat(host_dir, &st) != 0 || fchmod(dir, st.st_mode & 01777) != 0 ? -1 : 0;
    xsb_close_keeping_errno(dir);
    return rc;
}

/// The directory bind `op`, which has masks below it, bound back entry by entry (see above):
/// its source is attached at SPLIT_SOURCE of the staging root with the bind's attributes, its
/// entries cloned from there, then it is detached again. On failure `failed` names the path.
static int split_bind(int root, const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, char *failed, size_t failed_size,
                      char *reached, size_t reached_size) {
    xsb_copy_string(failed, failed_size, op->source);
    xsb_copy_string(reached, reached_size, "");
    int tree = (op->flags & XSB_MOUNT_F_TREE) ? cfg->mount_trees[op->tree] : xsb_mount_host_tree(op->source);
    if (tree < 0) return -1;
    int flags = op->flags & ~XSB_MOUNT_F_TREE;
    int stage = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (stage < 0) return xsb_close_keeping_errno(tree);
    int at_target;
    int rc = xsb_mount_attach_bind(stage, tree, SPLIT_SOURCE, flags, &at_target);
    int host_dir = rc == 0 ? openat(stage, SPLIT_SOURCE_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (host_dir >= 0) {
        struct split s = {.root = root, .cfg = cfg, .flags = flags};
        xsb_copy_string(s.path, sizeof s.path, op->target);
        s.length = xsb_string_length(s.path);
        rc = bind_back_directory(&s, host_dir);
        xsb_copy_string(failed, failed_size, s.path);
        xsb_copy_string(reached, reached_size, s.reached);
        xsb_close_keeping_errno(host_dir);
    } else {
        rc = -1;
    }
    int saved = errno;
    if (rc == 0 && (umount2(SPLIT_SOURCE, MNT_DETACH) != 0 || unlinkat(stage, SPLIT_SOURCE_NAME, AT_REMOVEDIR) != 0)) {
        xsb_copy_string(failed, failed_size, SPLIT_SOURCE);
        saved = errno;
        rc = -1;
    }
    close(stage);
    errno = saved;
    return rc;
}

/// The directory bind `op`, with masks below it: left out when a later bind of the same target
/// covers it whole, else split (split_bind); a failure is reported naming the path.
int xsb_masks_bind(int root, const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, int control_fd) {
    if (bound_again_later(cfg, op)) {
        if (op->flags & XSB_MOUNT_F_TREE) close(cfg->mount_trees[op->tree]);
        return 0;
    }
    char failed[PATH_SIZE], reached[PATH_SIZE], detail[240];
    if (split_bind(root, cfg, op, failed, sizeof failed, reached, sizeof reached) == 0) return 0;
    int saved = errno;
    // Say where: the entry (or the directory over a limit) under the masked bind.
    const char *what = saved == E2BIG ? "over " XSB_NUMBER_TEXT(XSB_MASKED_DIRECTORY_LIMIT) " entries beside a mask in "
                     : saved == EOVERFLOW ? "over " XSB_NUMBER_TEXT(XSB_MASKED_NAMES_LIMIT) " masked names directly in "
                     : "binding back beside a mask: ";
    if (reached[0] != '\0') {
        // Another name of a masked path (or of one on the way to a mask): a spelling that a
        // case-insensitive file system matches, a hard link, a bind mount of it.
        char both[PATH_SIZE];
        if (xsb_join_path(both, sizeof both, failed, " opens what the policy's ") != 0 ||
            xsb_join_path(both, sizeof both, both, reached) != 0 ||
            xsb_join_path(both, sizeof both, both, " opens (another spelling of the name, a hard link or a bind mount)") != 0)
            xsb_copy_string(both, sizeof both, failed);
        xsb_copy_string(failed, sizeof failed, both);
    }
    if (xsb_join_path(detail, sizeof detail, what, failed) != 0)
        xsb_copy_string(detail, sizeof detail, failed);
    xsb_child_report(control_fd, XSB_STEP_BIND_MOUNT, saved, detail);
    return -1;
}
