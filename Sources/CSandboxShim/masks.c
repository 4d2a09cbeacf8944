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

/// At most this many host files (each masked path below one split bind, each directory on the
/// way to one, and the bind's own root) are looked up before the bind is bound back.
#define XSB_MASKED_FILES_LIMIT 256

/// A host file that a masked path, or a directory on the way to one, opens. An entry bound back
/// under another name that opens the same file (another spelling on a case-insensitive file
/// system, a hard link, a bind mount of it) would show what the mask hides.
struct masked_file {
    dev_t device;
    ino_t inode;
    const char *target;  ///< an operation's target through this file
    size_t length;       ///< of its path: `target`'s first `length` bytes
    int masked;          ///< 1: the path is a mask's own (0: a directory on the way, or a root)
};

struct split {
    int root;
    const struct xsb_spawn_config *cfg;
    int flags;                   ///< the bind's flags, for each bound-back entry
    char path[PATH_SIZE];        ///< the path inside being built (on failure: the one that failed)
    size_t length;
    char link[PATH_SIZE];        ///< a symlink's text being recreated
    const struct masked_file *masked;  ///< what the masks below the bind open on the host
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

/// Whether the first `length` bytes of `a` and `b` are the same.
static int same_bytes(const char *a, const char *b, size_t length) {
    for (size_t i = 0; i < length; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/// The operation that the sandbox shows at the first `length` bytes of `mask`'s target, if it is
/// neither `op` nor `mask` (of several at one path, the last: it is mounted over the others).
static const struct xsb_mount_op *shown_at(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op,
                                           const struct xsb_mount_op *mask, size_t length) {
    const struct xsb_mount_op *shown = NULL;
    for (const struct xsb_mount_op *other = cfg->mounts; other < cfg->mounts + cfg->mount_count; other++) {
        if (other == op || other == mask || xsb_string_length(other->target) != length) continue;
        if (other->kind == XSB_MOUNT_MASK && mask->target[length] == '\0') continue;  // the same mask again
        if (same_bytes(other->target, mask->target, length)) shown = other;
    }
    return shown;
}

/// Whether `file` is what the first `length` bytes of `path` name.
static int names_path(const struct masked_file *file, const char *path, size_t length) {
    return file->length == length && same_bytes(file->target, path, length);
}

/// Records `st` as the file the first `length` bytes of `target` open, `masked` when that is a
/// mask's own path (once per file and path: two paths of the plan that open one file are told
/// apart later).
static int record_masked_file(struct masked_file *files, size_t *count, const struct stat *st, const char *target, size_t length,
                              int masked) {
    for (size_t k = 0; k < *count; k++) {
        if (files[k].device == st->st_dev && files[k].inode == st->st_ino && names_path(&files[k], target, length)) {
            files[k].masked |= masked;
            return 0;
        }
    }
    if (*count == XSB_MASKED_FILES_LIMIT) {
        errno = EOVERFLOW;
        return -1;
    }
    files[(*count)++] = (struct masked_file){.device = st->st_dev, .inode = st->st_ino, .target = target, .length = length, .masked = masked};
    return 0;
}

/// The root of bind `op`'s host tree, opened `O_PATH`.
static int open_bind_root(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op) {
    if (op->flags & XSB_MOUNT_F_TREE) return fcntl(cfg->mount_trees[op->tree], F_DUPFD_CLOEXEC, 0);
    return xsb_mount_host_source(op->source);
}

/// Records the files that `mask`'s path opens on the host, from the root of bind `op`'s tree
/// `dir` (closed here) down: each directory on the way and the masked entry, found by the
/// kernel's own lookup (a case-insensitive file system matches other spellings). Where another
/// bind shows its own tree on the way, the walk goes on in that tree; it ends where nothing more
/// exists, at a symlink or file on the way (the split refuses those), and where no host file is
/// shown (a tmpfs, a file of the plan).
static int walk_masked_path(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, int dir,
                            const struct xsb_mount_op *mask, struct masked_file *files, size_t *count) {
    struct stat st;
    for (size_t start = xsb_string_length(op->target) + 1;;) {
        size_t end = start;
        while (mask->target[end] != '\0' && mask->target[end] != '/') end++;
        const struct xsb_mount_op *shown = shown_at(cfg, op, mask, end);
        if (shown != NULL) {
            close(dir);
            if (shown->kind != XSB_MOUNT_BIND) return 0;
            // The plan mounts parents first: a nested bind comes later, its passed tree still open.
            if (shown < op) {
                errno = EINVAL;
                return -1;
            }
            dir = open_bind_root(cfg, shown);
            if (dir < 0) return errno == ENOENT ? 0 : -1;
            if (fstat(dir, &st) != 0 || record_masked_file(files, count, &st, mask->target, end, mask->target[end] == '\0') != 0)
                return xsb_close_keeping_errno(dir);
            if (mask->target[end] == '\0' || !S_ISDIR(st.st_mode)) {
                close(dir);
                return 0;
            }
            op = shown;
            start = end + 1;
            continue;
        }
        char name[256];
        if (end - start >= sizeof name) {
            errno = ENAMETOOLONG;
            return xsb_close_keeping_errno(dir);
        }
        for (size_t b = start; b < end; b++) name[b - start] = mask->target[b];
        name[end - start] = '\0';
        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) return xsb_close_keeping_errno(dir);
            close(dir);
            return 0;  // nothing (more) to reach
        }
        if (record_masked_file(files, count, &st, mask->target, end, mask->target[end] == '\0') != 0) return xsb_close_keeping_errno(dir);
        int next = mask->target[end] == '\0' || !S_ISDIR(st.st_mode) ? -1 : openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(dir);
        if (next < 0) return mask->target[end] == '\0' || !S_ISDIR(st.st_mode) ? 0 : -1;
        dir = next;
        start = end + 1;
    }
}

/// Records what the masks below the bind `op` (whose host tree is `host_dir`) hide: the tree's
/// own root, and for each mask each file on its path (walk_masked_path). The entries bound back
/// are compared with these files, not only with their names.
static int find_masked_files(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, int host_dir,
                             struct masked_file *files, size_t *count, char *failed, size_t failed_size) {
    *count = 0;
    struct stat st;
    if (fstat(host_dir, &st) != 0 || record_masked_file(files, count, &st, op->target, xsb_string_length(op->target), 0) != 0) return -1;
    for (const struct xsb_mount_op *mask = cfg->mounts; mask < cfg->mounts + cfg->mount_count; mask++) {
        if (mask->kind != XSB_MOUNT_MASK || !is_below(mask->target, op->target)) continue;
        int dir = openat(host_dir, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0 || walk_masked_path(cfg, op, dir, mask, files, count) != 0) {
            int saved = errno;
            xsb_copy_string(failed, failed_size, mask->target);
            errno = saved;
            return -1;
        }
    }
    return 0;
}

/// Whether `st`, the entry at `s->path`, is under another path a file the masks need hidden
/// (`masks_only`: a masked path's own; else also a directory on the way to one) (recorded in
/// `s->reached`, errno EINVAL).
static int reaches_masked_file(struct split *s, const struct stat *st, int masks_only) {
    for (size_t k = 0; k < s->masked_count; k++) {
        const struct masked_file *file = &s->masked[k];
        if (file->device != st->st_dev || file->inode != st->st_ino || names_path(file, s->path, s->length)) continue;
        if (masks_only && !file->masked) continue;
        xsb_copy_string(s->reached, file->length + 1 < sizeof s->reached ? file->length + 1 : sizeof s->reached, file->target);
        errno = EINVAL;
        return 1;
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
    if (type == DT_UNKNOWN || type == DT_LNK) {
        struct stat st;
        if (fstatat(host_dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
        if (reaches_masked_file(s, &st, 0)) return -1;
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
    if (reaches_masked_file(s, &st, 0)) {
        close(tree);
        return -1;
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
                // A directory on the way to a mask can itself be another name of a masked one
                // (another name of a directory on the way is split too, entry by entry).
                struct stat st;
                rc = sub < 0 || fstat(sub, &st) != 0 || reaches_masked_file(s, &st, 1) ? -1 : bind_back_directory(s, sub);
                if (sub >= 0) xsb_close_keeping_errno(sub);
            } else if (planned == 0) {
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
        struct masked_file masked[XSB_MASKED_FILES_LIMIT];
        rc = find_masked_files(cfg, op, host_dir, masked, &s.masked_count, s.path, sizeof s.path);
        s.masked = masked;
        if (rc == 0) rc = bind_back_directory(&s, host_dir);
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

/// Appends `text` to `buffer` (`*used` bytes so far), as much of it as fits.
static void append_text(char *buffer, size_t size, size_t *used, const char *text) {
    xsb_copy_string(buffer + *used, size - *used, text);
    *used += xsb_string_length(buffer + *used);
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
                     : saved == EOVERFLOW ? "over " XSB_NUMBER_TEXT(XSB_MASKED_FILES_LIMIT) " files to hide beside masks (masked paths and directories on their way), at "
                     : "binding back beside a mask: ";
    size_t used = 0;
    append_text(detail, sizeof detail, &used, what);
    append_text(detail, sizeof detail, &used, failed);
    if (reached[0] != '\0') {
        // Another name of a masked path or of a directory on its way: another spelling that a
        // case-insensitive file system matches, a hard link, a bind mount of it.
        append_text(detail, sizeof detail, &used, " is another name of ");
        append_text(detail, sizeof detail, &used, reached);
    }
    xsb_child_report(control_fd, XSB_STEP_BIND_MOUNT, saved, detail);
    return -1;
}
