// The sandbox's file system: a fresh tmpfs root holding only what the policy binds, a fresh
// /proc, a minimal /dev, a size-limited /tmp and /dev/shm (directories of the root's tmpfs, which
// is sized for them); then the old root detached and the new one entered.
//
// Technique (as in bubblewrap): mount a tmpfs over /tmp of our private mount namespace and
// pivot into it, so the host's root stays reachable as /oldroot — even /tmp, which the tmpfs
// covered — while /newroot is populated; then detach /oldroot and move /newroot over / (chroot).
//
// No path is ever resolved through a symlink: a writable bind lets the sandbox plant symlinks
// that a later launch would otherwise follow out of /newroot (onto the host, via /oldroot).
// Targets are walked component by component from a /newroot dirfd with O_NOFOLLOW; bind
// sources are opened with RESOLVE_NO_SYMLINKS (the supervisor passes real paths); mounts are
// built detached (open_tree, fsmount), get their flags there, and are attached with move_mount
// onto the fd of the exact target, so there is also no window in which a bind is writable.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

// From linux/mount.h and linux/openat2.h, which clash with glibc 2.36's <sys/mount.h>.
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

static int close_keeping_errno(int fd) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

/// Opens the parent directory of `target` (absolute, inside the sandbox) below `root`,
/// creating missing directories, following no symlink; copies the last component to `leaf`.
static int open_parent(int root, const char *target, char *leaf, size_t leaf_size) {
    int dir = fcntl(root, F_DUPFD_CLOEXEC, 0);
    if (dir < 0) return -1;
    const char *p = target;
    for (;;) {
        while (*p == '/') p++;
        const char *end = p;
        while (*end != '\0' && *end != '/') end++;
        size_t len = (size_t)(end - p);
        if (len == 0 || len >= leaf_size) {
            errno = len == 0 ? EINVAL : ENAMETOOLONG;
            return close_keeping_errno(dir);
        }
        for (size_t i = 0; i < len; i++) leaf[i] = p[i];
        leaf[len] = '\0';
        const char *rest = end;
        while (*rest == '/') rest++;
        if (*rest == '\0') return dir;  // `leaf` is the last component
        if (mkdirat(dir, leaf, 0755) != 0 && errno != EEXIST) return close_keeping_errno(dir);
        int next = openat(dir, leaf, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close_keeping_errno(dir);
        if (next < 0) return -1;  // ENOTDIR for a symlink: refused
        dir = next;
        p = end;
    }
}

/// Creates (if needed) and opens the mount point `leaf` in the directory `parent`.
static int open_point_in(int parent, const char *leaf, int directory) {
    if (directory) {
        if (mkdirat(parent, leaf, 0755) != 0 && errno != EEXIST) return -1;
    } else if (faccessat(parent, leaf, F_OK, AT_SYMLINK_NOFOLLOW) != 0) {
        // Create only what is missing: opening an existing file for writing could fail for
        // reasons that do not matter here (ETXTBSY for a program someone runs, EROFS).
        if (errno != ENOENT) return -1;
        int fd = openat(parent, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) return -1;
        close(fd);
    }
    int point = openat(parent, leaf, O_PATH | O_NOFOLLOW | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
    if (point < 0) return -1;
    struct stat st;
    // O_PATH|O_NOFOLLOW opens a symlink itself: never mount onto one.
    if (fstat(point, &st) != 0) return close_keeping_errno(point);
    if (S_ISLNK(st.st_mode)) {
        errno = ELOOP;
        return close_keeping_errno(point);
    }
    return point;
}

/// Creates (if needed) and opens the exact mount point `target` below `root`.
static int open_mount_point(int root, const char *target, int directory) {
    char leaf[256];
    int parent = open_parent(root, target, leaf, sizeof leaf);
    if (parent < 0) return -1;
    int point = open_point_in(parent, leaf, directory);
    close_keeping_errno(parent);
    return point;
}

static int attach(int mount_fd, int point) {
    return (int)syscall(SYS_move_mount, mount_fd, "", point, "", XSB_MOVE_MOUNT_F_EMPTY_PATH | XSB_MOVE_MOUNT_T_EMPTY_PATH);
}

/// Gives the detached mount `tree` (and every mount below it) a bind's attributes.
static int set_bind_attributes(int tree, int flags) {
    uint64_t attrs = XSB_MOUNT_ATTR_NOSUID;
    if (flags & (XSB_MOUNT_F_DEVICE | XSB_MOUNT_F_NOEXEC)) attrs |= XSB_MOUNT_ATTR_NOEXEC;
    if (!(flags & XSB_MOUNT_F_DEVICE)) attrs |= XSB_MOUNT_ATTR_NODEV;
    if (!(flags & (XSB_MOUNT_F_WRITABLE | XSB_MOUNT_F_DEVICE))) attrs |= XSB_MOUNT_ATTR_RDONLY;
    struct xsb_mount_attr attr = {.attr_set = attrs};
    return (int)syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | XSB_AT_RECURSIVE, &attr, sizeof attr);
}

/// Gives the detached mount `tree` a bind's attributes and attaches it at `target` below
/// `root`; closes `tree`. On failure `*at_target` tells whether the mount point was the problem.
static int attach_bind(int root, int tree, const char *target, int flags, int *at_target) {
    *at_target = 0;
    if (set_bind_attributes(tree, flags) != 0) return close_keeping_errno(tree);
    int point = open_mount_point(root, target, (flags & XSB_MOUNT_F_DIRECTORY) != 0);
    *at_target = 1;
    if (point < 0) return close_keeping_errno(tree);
    int rc = attach(tree, point);
    close_keeping_errno(point);
    close_keeping_errno(tree);
    return rc;
}

/// A detached recursive copy of host path `source` (a real path: no symlink on the way).
static int host_tree(const char *source) {
    char src[PATH_SIZE];
    if (xsb_join_path(src, sizeof src, OLD, source) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    struct xsb_open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = XSB_RESOLVE_NO_SYMLINKS};
    int src_fd = (int)syscall(SYS_openat2, AT_FDCWD, src, &how, sizeof how);
    if (src_fd < 0) return -1;
    int tree = (int)syscall(SYS_open_tree, src_fd, "", XSB_OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH | XSB_AT_RECURSIVE);
    close_keeping_errno(src_fd);
    return tree;
}

/// Binds host path `source` (a real path: no symlink on the way) at `target` below `root`.
/// On failure `*at_target` tells whether the mount point (not the source) was the problem.
static int bind_at(int root, const char *source, const char *target, int flags, int *at_target) {
    *at_target = 0;
    int tree = host_tree(source);
    if (tree < 0) return -1;
    return attach_bind(root, tree, target, flags, at_target);
}

static int fs_string(int fs, const char *key, const char *value) {
    return (int)syscall(SYS_fsconfig, fs, XSB_FSCONFIG_SET_STRING, key, value, 0);
}

/// Decimal or octal text of `value` without snprintf (not async-signal-safe).
static void number_text(char *out, uint64_t value, unsigned base) {
    char digits[24];
    size_t n = 0;
    do { digits[n++] = (char)('0' + value % base); value /= base; } while (value != 0 && n < sizeof digits);
    size_t i = 0;
    while (n > 0) out[i++] = digits[--n];
    out[i] = '\0';
}

/// A fresh tmpfs of `bytes` (and a proportionate inode budget) at `target` below `root`.
static int tmpfs_at(int root, const char *target, uint32_t mode, uint64_t bytes, uint64_t attrs) {
    char size_text[24], mode_text[24], inodes_text[24];
    number_text(size_text, bytes, 10);
    number_text(mode_text, mode, 8);
    // Without a bound on inodes, empty files could exhaust kernel memory past the size limit.
    number_text(inodes_text, bytes / 1024 + 64, 10);
    int fs = (int)syscall(SYS_fsopen, "tmpfs", XSB_FSOPEN_CLOEXEC);
    if (fs < 0) return -1;
    if (fs_string(fs, "size", size_text) != 0 || fs_string(fs, "mode", mode_text) != 0 ||
        fs_string(fs, "nr_inodes", inodes_text) != 0 ||
        syscall(SYS_fsconfig, fs, XSB_FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) {
        return close_keeping_errno(fs);
    }
    int mnt = (int)syscall(SYS_fsmount, fs, XSB_FSMOUNT_CLOEXEC, attrs);
    close_keeping_errno(fs);
    if (mnt < 0) return -1;
    int point = open_mount_point(root, target, 1);
    if (point < 0) return close_keeping_errno(mnt);
    int rc = attach(mnt, point);
    close_keeping_errno(point);
    close_keeping_errno(mnt);
    return rc;
}

/// A bind of the new root's own directory `target` onto itself: a mount with flags of its own,
/// but no file system of its own. Every superblock registers a memcg-aware shrinker, and the
/// kernel sizes each new memory cgroup by the most of those ever registered at once (1 KiB per
/// 64), so each superblock a sandbox saves makes every sandbox's memory cgroup cheaper.
static int directory_mount_at(int root, const char *target, uint64_t attrs) {
    int point = open_mount_point(root, target, 1);
    if (point < 0) return -1;
    int tree = (int)syscall(SYS_open_tree, point, "", XSB_OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH);
    if (tree < 0) return close_keeping_errno(point);
    struct xsb_mount_attr attr = {.attr_set = attrs};
    int rc = (int)syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr);
    if (rc == 0) rc = attach(tree, point);
    close_keeping_errno(tree);
    close_keeping_errno(point);
    return rc;
}

/// A directory of the root's tmpfs that everyone may write (sticky, like /tmp) with a mount of
/// its own, writable while the root is read-only: no file system of its own (directory_mount_at).
/// /tmp and /dev/shm are such directories, so they share one size limit, the root's, which
/// xsb_setup_mounts sizes for the policy's /tmp: what the sandbox can write in both together.
static int shared_directory_at(int root, const char *target, uint64_t attrs) {
    char leaf[256];
    int parent = open_parent(root, target, leaf, sizeof leaf);
    if (parent < 0) return -1;
    if (mkdirat(parent, leaf, 01777) != 0 && errno != EEXIST) return close_keeping_errno(parent);
    int dir = openat(parent, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close_keeping_errno(parent);
    if (dir < 0) return -1;
    int rc = fchmod(dir, 01777);  // mkdirat's mode passed through the umask
    close_keeping_errno(dir);
    if (rc != 0) return -1;
    return directory_mount_at(root, target, attrs);
}

/// The staging tmpfs's options: 4 MiB and 16,384 inodes for the root's directories and files,
/// plus /tmp's size and inode budget (the same as tmpfs_at gives a tmpfs of that size). Once the
/// root is built, size_root_for_tmp takes the 4 MiB back.
static void staging_options(char *out, uint64_t tmp_size) {
    char size_text[24], inodes_text[24];
    number_text(size_text, (4u << 20) + tmp_size, 10);
    number_text(inodes_text, 16384 + tmp_size / 1024 + 64, 10);
    const char *parts[] = {"mode=0755,size=", size_text, ",nr_inodes=", inodes_text};
    size_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const char *c = parts[i]; *c; c++) out[n++] = *c;
    out[n] = '\0';
}

/// Resizes the root's tmpfs, once everything but /tmp is in it, to what it holds plus /tmp's
/// size and inode budget: /tmp and /dev/shm together can then take exactly the policy's /tmp
/// size, as a tmpfs of its own could, and nothing else can grow (the root is read-only from here on).
static int size_root_for_tmp(int root, uint64_t tmp_size) {
    struct statfs st;
    if (fstatfs(root, &st) != 0) return -1;
    char size_text[24], inodes_text[24];
    number_text(size_text, (uint64_t)(st.f_blocks - st.f_bfree) * (uint64_t)st.f_bsize + tmp_size, 10);
    number_text(inodes_text, (uint64_t)(st.f_files - st.f_ffree) + tmp_size / 1024 + 64, 10);
    int fs = (int)syscall(SYS_fspick, root, "", XSB_FSPICK_CLOEXEC | XSB_FSPICK_EMPTY_PATH);
    if (fs < 0) return -1;
    int rc = fs_string(fs, "size", size_text) == 0 && fs_string(fs, "nr_inodes", inodes_text) == 0 &&
                     syscall(SYS_fsconfig, fs, XSB_FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) == 0
                 ? 0
                 : -1;
    close_keeping_errno(fs);
    return rc;
}

static int symlink_at(int root, const char *text, const char *target) {
    char leaf[256];
    int parent = open_parent(root, target, leaf, sizeof leaf);
    if (parent < 0) return -1;
    int rc = symlinkat(text, parent, leaf);
    close_keeping_errno(parent);
    return rc;
}

static int file_at(int root, const char *target, const char *bytes, uint64_t size, uint32_t mode) {
    char leaf[256];
    int parent = open_parent(root, target, leaf, sizeof leaf);
    if (parent < 0) return -1;
    int fd = openat(parent, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    close_keeping_errno(parent);
    if (fd < 0) return -1;
    ssize_t n = write(fd, bytes, (size_t)size);
    int saved = errno;
    close(fd);
    if (n == (ssize_t)size) return 0;
    errno = n < 0 ? saved : EIO;
    return -1;
}

/// null, zero, full, random, urandom bound from the host (a user namespace cannot mknod), and
/// tty with a controlling terminal; nothing else: no disks, no kmsg, no mem, no pts.
static int setup_dev(int root, int controlling_terminal, int control_fd) {
    static const char *const nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
    static const char *const links[][2] = {
        {"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
        {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"},
    };
    // A directory of the root's tmpfs, not a tmpfs of its own (directory_mount_at); read-only
    // below, like the root, before the program runs.
    if (directory_mount_at(root, "/dev", XSB_MOUNT_ATTR_NOSUID | XSB_MOUNT_ATTR_NOEXEC) != 0) {
        xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, "/dev");
        return -1;
    }
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        int at_target;
        if (bind_at(root, nodes[i], nodes[i], XSB_MOUNT_F_DEVICE, &at_target) != 0) {
            xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, nodes[i]);
            return -1;
        }
    }
    // With a controlling terminal (the caller's relay pty), /dev/tty: the kernel resolves it to
    // the opener's own controlling terminal, so it reaches that pty and nothing else (ENXIO
    // without one). A host without /dev/tty just leaves it out.
    if (controlling_terminal) {
        int at_target;
        if (bind_at(root, "/dev/tty", "/dev/tty", XSB_MOUNT_F_DEVICE, &at_target) != 0 && (at_target || errno != ENOENT)) {
            xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, "/dev/tty");
            return -1;
        }
    }
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        if (symlink_at(root, links[i][0], links[i][1]) != 0) {
            xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, links[i][1]);
            return -1;
        }
    }
    // Shares /tmp's size limit (shared_directory_at): one superblock less per sandbox than a
    // tmpfs of its own, which every memory cgroup on the machine pays for (README, performance).
    if (shared_directory_at(root, "/dev/shm", XSB_MOUNT_ATTR_NOSUID | XSB_MOUNT_ATTR_NODEV | XSB_MOUNT_ATTR_NOEXEC) != 0) {
        xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, "/dev/shm");
        return -1;
    }
    struct xsb_mount_attr attr = {.attr_set = XSB_MOUNT_ATTR_RDONLY | XSB_MOUNT_ATTR_NOSUID | XSB_MOUNT_ATTR_NOEXEC};
    if (syscall(SYS_mount_setattr, AT_FDCWD, NEW "/dev", 0, &attr, sizeof attr) != 0) {
        xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, "/dev read-only");
        return -1;
    }
    return 0;
}

/// A fresh procfs for the new PID namespace, with the knobs that outlive the sandbox
/// (sysctls, sysrq, irq and bus settings) made read-only on top of the user-namespace checks.
/// Paths below a procfs we just mounted: nothing of the sandbox's can be on them yet.
static int setup_proc(int root, int control_fd) {
    static const char *const protect[] = {NEW "/proc/sys", NEW "/proc/sysrq-trigger", NEW "/proc/irq", NEW "/proc/bus"};
    int point = open_mount_point(root, "/proc", 1);
    if (point < 0 || mount("proc", NEW "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
        xsb_child_report(control_fd, XSB_STEP_PROC_MOUNT, errno, "/proc");
        if (point >= 0) close(point);
        return -1;
    }
    close(point);
    for (size_t i = 0; i < sizeof protect / sizeof protect[0]; i++) {
        if (mount(protect[i], protect[i], NULL, MS_BIND | MS_REC, NULL) != 0) {
            if (errno == ENOENT) continue;
            xsb_child_report(control_fd, XSB_STEP_PROC_MOUNT, errno, protect[i] + sizeof NEW - 1);
            return -1;
        }
        struct xsb_mount_attr attr = {.attr_set = XSB_MOUNT_ATTR_RDONLY | XSB_MOUNT_ATTR_NOSUID | XSB_MOUNT_ATTR_NODEV | XSB_MOUNT_ATTR_NOEXEC};
        if (syscall(SYS_mount_setattr, AT_FDCWD, protect[i], XSB_AT_RECURSIVE, &attr, sizeof attr) != 0) {
            xsb_child_report(control_fd, XSB_STEP_PROC_MOUNT, errno, protect[i] + sizeof NEW - 1);
            return -1;
        }
    }
    return 0;
}

// Masks that the host cannot detach from outside. A mount sits on a dentry; when the host
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

struct split {
    int root;
    const struct xsb_spawn_config *cfg;
    int flags;                   ///< the bind's flags, for each bound-back entry
    char path[PATH_SIZE];        ///< the path inside being built (on failure: the one that failed)
    size_t length;
    char link[PATH_SIZE];        ///< a symlink's text being recreated
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
static int has_mask_below(const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op) {
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
    if (fstat(tree, &st) != 0) return close_keeping_errno(tree);
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
        close(tree);
        return 0;
    }
    int flags = (s->flags & ~XSB_MOUNT_F_DIRECTORY) | (S_ISDIR(st.st_mode) ? XSB_MOUNT_F_DIRECTORY : 0);
    // The mount point is made in `dir` itself: no walk from the root for each entry.
    int point = set_bind_attributes(tree, flags) == 0 ? open_point_in(dir, name, S_ISDIR(st.st_mode)) : -1;
    int rc = point < 0 ? -1 : attach(tree, point);
    if (point >= 0) close_keeping_errno(point);
    close_keeping_errno(tree);
    return rc;
}

/// Makes `s->path` a directory of the root with the entries of `host_dir` bound back, except
/// what other operations make (masks among them), and directories on the way to those, which
/// are made the same way.
static int bind_back_directory(struct split *s, int host_dir) {
    int point = open_mount_point(s->root, s->path, 1);
    if (point < 0) return -1;
    int dir = openat(point, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close_keeping_errno(point);
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
                return close_keeping_errno(dir);
            }
            size_t name_length = xsb_string_length(name);
            if (length + 1 + name_length >= sizeof s->path) {
                errno = ENAMETOOLONG;
                return close_keeping_errno(dir);
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
                if (sub >= 0) close_keeping_errno(sub);
            } else if (planned == 0) {
                rc = bind_back_entry(s, host_dir, dir, name, d->d_type);
            }
            if (rc != 0) return close_keeping_errno(dir);
            s->path[length] = '\0';
            s->length = length;
        }
    }
    // The directory keeps the host's permission bits (the root is read-only before anything runs).
    struct stat st;
    int rc = n < 0 || fstat(host_dir, &st) != 0 || fchmod(dir, st.st_mode & 01777) != 0 ? -1 : 0;
    close_keeping_errno(dir);
    return rc;
}

/// The directory bind `op`, which has masks below it, bound back entry by entry (see above):
/// its source is attached at SPLIT_SOURCE of the staging root with the bind's attributes, its
/// entries cloned from there, then it is detached again. On failure `failed` names the path.
static int split_bind(int root, const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, char *failed, size_t failed_size) {
    xsb_copy_string(failed, failed_size, op->source);
    int tree = (op->flags & XSB_MOUNT_F_TREE) ? cfg->mount_trees[op->tree] : host_tree(op->source);
    if (tree < 0) return -1;
    int flags = op->flags & ~XSB_MOUNT_F_TREE;
    int stage = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (stage < 0) return close_keeping_errno(tree);
    int at_target;
    int rc = attach_bind(stage, tree, SPLIT_SOURCE, flags, &at_target);
    int host_dir = rc == 0 ? openat(stage, SPLIT_SOURCE_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (host_dir >= 0) {
        struct split s = {.root = root, .cfg = cfg, .flags = flags};
        xsb_copy_string(s.path, sizeof s.path, op->target);
        s.length = xsb_string_length(s.path);
        rc = bind_back_directory(&s, host_dir);
        xsb_copy_string(failed, failed_size, s.path);
        close_keeping_errno(host_dir);
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

static int apply_op(int root, const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, int control_fd) {
    switch (op->kind) {
    case XSB_MOUNT_BIND: {
        if (has_mask_below(cfg, op) && bound_again_later(cfg, op)) {
            if (op->flags & XSB_MOUNT_F_TREE) close(cfg->mount_trees[op->tree]);
            return 0;
        }
        if (has_mask_below(cfg, op)) {
            char failed[PATH_SIZE], detail[240];
            if (split_bind(root, cfg, op, failed, sizeof failed) == 0) return 0;
            int saved = errno;
            // Say where: the entry (or the directory over the limit) under the masked bind.
            if (xsb_join_path(detail, sizeof detail, saved == E2BIG ? "over " XSB_NUMBER_TEXT(XSB_MASKED_DIRECTORY_LIMIT) " entries beside a mask in " : "binding back beside a mask: ", failed) != 0)
                xsb_copy_string(detail, sizeof detail, failed);
            xsb_child_report(control_fd, XSB_STEP_BIND_MOUNT, saved, detail);
            return -1;
        }
        int at_target;
        // A source the supervisor opened as a detached mount (its host path may not be
        // reachable with the sandbox's ids), or a host path below the old root.
        int rc = (op->flags & XSB_MOUNT_F_TREE)
                     ? attach_bind(root, cfg->mount_trees[op->tree], op->target, op->flags & ~XSB_MOUNT_F_TREE, &at_target)
                     : bind_at(root, op->source, op->target, op->flags, &at_target);
        if (rc == 0) return 0;
        // A symlink on the way to the mount point reads as ENOTDIR or ELOOP: say where.
        char detail[240];
        if (xsb_join_path(detail, sizeof detail, at_target ? "mount point " : "source ", at_target ? op->target : op->source) != 0)
            xsb_copy_string(detail, sizeof detail, op->target);
        xsb_child_report(control_fd, XSB_STEP_BIND_MOUNT, errno, detail);
        return -1;
    }
    case XSB_MOUNT_TMPFS:
        if (tmpfs_at(root, op->target, op->mode ? op->mode : 01777, op->size, XSB_MOUNT_ATTR_NOSUID | XSB_MOUNT_ATTR_NODEV) == 0) return 0;
        xsb_child_report(control_fd, XSB_STEP_TMPFS_MOUNT, errno, op->target);
        return -1;
    case XSB_MOUNT_SYMLINK:
        if (symlink_at(root, op->source, op->target) == 0) return 0;
        xsb_child_report(control_fd, XSB_STEP_SYMLINK, errno, op->target);
        return -1;
    case XSB_MOUNT_FILE:
        if (file_at(root, op->target, op->source, op->size, op->mode ? op->mode : 0644) == 0) return 0;
        break;
    case XSB_MOUNT_MASK: {
        // A directory becomes an empty read-only tmpfs; a file becomes /dev/null on a nodev
        // mount, which nobody can open (EACCES).
        int at_target;
        int rc = (op->flags & XSB_MOUNT_F_DIRECTORY)
                     ? tmpfs_at(root, op->target, 0555, 4096, XSB_MOUNT_ATTR_RDONLY | XSB_MOUNT_ATTR_NOSUID | XSB_MOUNT_ATTR_NODEV | XSB_MOUNT_ATTR_NOEXEC)
                     : bind_at(root, "/dev/null", op->target, 0, &at_target);
        if (rc == 0) return 0;
        xsb_child_report(control_fd, XSB_STEP_BIND_MOUNT, errno, op->target);
        return -1;
    }
    default:
        errno = EINVAL;
        break;
    }
    xsb_child_report(control_fd, XSB_STEP_FILE_CREATE, errno, op->target);
    return -1;
}

int xsb_setup_mounts(const struct xsb_spawn_config *cfg, int control_fd) {
    // Nothing we mount may propagate back to the host's namespace.
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        xsb_child_report(control_fd, XSB_STEP_MOUNT_PRIVATE, errno, "/");
        return -1;
    }
    // The staging tmpfs becomes the sandbox's root, and holds its /tmp and /dev/shm too (shared_directory_at).
    char staging[96];
    staging_options(staging, cfg->tmp_size);
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, staging) != 0 ||
        chdir("/tmp") != 0 || mkdir("newroot", 0755) != 0 || mkdir("oldroot", 0755) != 0 ||
        mount("newroot", "newroot", NULL, MS_BIND, NULL) != 0) {
        xsb_child_report(control_fd, XSB_STEP_ROOT_TMPFS, errno, "/tmp");
        return -1;
    }
    if (syscall(SYS_pivot_root, ".", "oldroot") != 0 || chdir("/") != 0) {
        xsb_child_report(control_fd, XSB_STEP_PIVOT_ROOT, errno, "first pivot");
        return -1;
    }
    int root = open(NEW, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0) {
        xsb_child_report(control_fd, XSB_STEP_ROOT_TMPFS, errno, NEW);
        return -1;
    }

    int ok = setup_proc(root, control_fd) == 0 && setup_dev(root, cfg->controlling_terminal, control_fd) == 0;
    if (ok && shared_directory_at(root, "/tmp", XSB_MOUNT_ATTR_NOSUID | XSB_MOUNT_ATTR_NODEV) != 0) {
        xsb_child_report(control_fd, XSB_STEP_TMPFS_MOUNT, errno, "/tmp");
        ok = 0;
    }
    for (size_t i = 0; ok && i < cfg->mount_count; i++) ok = apply_op(root, cfg, &cfg->mounts[i], control_fd) == 0;
    if (ok && size_root_for_tmp(root, cfg->tmp_size) != 0) {
        xsb_child_report(control_fd, XSB_STEP_TMPFS_MOUNT, errno, "/tmp (sizing the root)");
        ok = 0;
    }
    close(root);
    if (!ok) return -1;

    // Everything outside the explicit writable mounts is read-only, the root included.
    if (mount(NEW, NEW, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) {
        xsb_child_report(control_fd, XSB_STEP_ROOT_READONLY, errno, "/");
        return -1;
    }
    if (umount2(OLD, MNT_DETACH) != 0) {
        xsb_child_report(control_fd, XSB_STEP_PIVOT_ROOT, errno, "detach old root");
        return -1;
    }
    // Enter /newroot by moving it over / and chroot-ing into it, not by a second pivot_root:
    // pivot_root walks every thread on the machine (chroot_fs_refs), which made launches slower
    // the more sandboxes ran. What stays below the new root is only the staging tmpfs, whose
    // host root (/oldroot) was detached above: nothing of the host to walk back out to.
    if (chdir(NEW) != 0 || mount(".", "/", NULL, MS_MOVE, NULL) != 0 || chroot(".") != 0 || chdir("/") != 0) {
        xsb_child_report(control_fd, XSB_STEP_PIVOT_ROOT, errno, "enter new root");
        return -1;
    }
    return 0;
}
