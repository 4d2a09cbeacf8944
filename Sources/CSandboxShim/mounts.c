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
#include "mount_api.h"

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
            return xsb_close_keeping_errno(dir);
        }
        for (size_t i = 0; i < len; i++) leaf[i] = p[i];
        leaf[len] = '\0';
        const char *rest = end;
        while (*rest == '/') rest++;
        if (*rest == '\0') return dir;  // `leaf` is the last component
        if (mkdirat(dir, leaf, 0755) != 0 && errno != EEXIST) return xsb_close_keeping_errno(dir);
        int next = openat(dir, leaf, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        xsb_close_keeping_errno(dir);
        if (next < 0) return -1;  // ENOTDIR for a symlink: refused
        dir = next;
        p = end;
    }
}

/// Creates (if needed) and opens the mount point `leaf` in the directory `parent`.
int xsb_mount_point_in(int parent, const char *leaf, int directory) {
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
    if (fstat(point, &st) != 0) return xsb_close_keeping_errno(point);
    if (S_ISLNK(st.st_mode)) {
        errno = ELOOP;
        return xsb_close_keeping_errno(point);
    }
    return point;
}

/// Creates (if needed) and opens the exact mount point `target` below `root`.
int xsb_mount_point(int root, const char *target, int directory) {
    char leaf[256];
    int parent = open_parent(root, target, leaf, sizeof leaf);
    if (parent < 0) return -1;
    int point = xsb_mount_point_in(parent, leaf, directory);
    xsb_close_keeping_errno(parent);
    return point;
}

int xsb_mount_attach(int mount_fd, int point) {
    return (int)syscall(SYS_move_mount, mount_fd, "", point, "", XSB_MOVE_MOUNT_F_EMPTY_PATH | XSB_MOVE_MOUNT_T_EMPTY_PATH);
}

/// Gives the detached mount `tree` (and every mount below it) a bind's attributes.
int xsb_mount_set_bind_attributes(int tree, int flags) {
    uint64_t attrs = XSB_MOUNT_ATTR_NOSUID;
    if (flags & (XSB_MOUNT_F_DEVICE | XSB_MOUNT_F_NOEXEC)) attrs |= XSB_MOUNT_ATTR_NOEXEC;
    if (!(flags & XSB_MOUNT_F_DEVICE)) attrs |= XSB_MOUNT_ATTR_NODEV;
    if (!(flags & (XSB_MOUNT_F_WRITABLE | XSB_MOUNT_F_DEVICE))) attrs |= XSB_MOUNT_ATTR_RDONLY;
    struct xsb_mount_attr attr = {.attr_set = attrs};
    return (int)syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | XSB_AT_RECURSIVE, &attr, sizeof attr);
}

/// Gives the detached mount `tree` a bind's attributes and attaches it at `target` below
/// `root`; closes `tree`. On failure `*at_target` tells whether the mount point was the problem.
int xsb_mount_attach_bind(int root, int tree, const char *target, int flags, int *at_target) {
    *at_target = 0;
    if (xsb_mount_set_bind_attributes(tree, flags) != 0) return xsb_close_keeping_errno(tree);
    int point = xsb_mount_point(root, target, (flags & XSB_MOUNT_F_DIRECTORY) != 0);
    *at_target = 1;
    if (point < 0) return xsb_close_keeping_errno(tree);
    int rc = xsb_mount_attach(tree, point);
    xsb_close_keeping_errno(point);
    xsb_close_keeping_errno(tree);
    return rc;
}

/// Host path `source` (a real path: no symlink on the way), opened `O_PATH`.
int xsb_mount_host_source(const char *source) {
    char src[PATH_SIZE];
    if (xsb_join_path(src, sizeof src, OLD, source) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    struct xsb_open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = XSB_RESOLVE_NO_SYMLINKS};
    return (int)syscall(SYS_openat2, AT_FDCWD, src, &how, sizeof how);
}

/// A detached recursive copy of host path `source` (a real path: no symlink on the way).
int xsb_mount_host_tree(const char *source) {
    int src_fd = xsb_mount_host_source(source);
    if (src_fd < 0) return -1;
    int tree = (int)syscall(SYS_open_tree, src_fd, "", XSB_OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH | XSB_AT_RECURSIVE);
    xsb_close_keeping_errno(src_fd);
    return tree;
}

/// Binds host path `source` (a real path: no symlink on the way) at `target` below `root`.
/// On failure `*at_target` tells whether the mount point (not the source) was the problem.
static int bind_at(int root, const char *source, const char *target, int flags, int *at_target) {
    *at_target = 0;
    int tree = xsb_mount_host_tree(source);
    if (tree < 0) return -1;
    return xsb_mount_attach_bind(root, tree, target, flags, at_target);
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
        return xsb_close_keeping_errno(fs);
    }
    int mnt = (int)syscall(SYS_fsmount, fs, XSB_FSMOUNT_CLOEXEC, attrs);
    xsb_close_keeping_errno(fs);
    if (mnt < 0) return -1;
    int point = xsb_mount_point(root, target, 1);
    if (point < 0) return xsb_close_keeping_errno(mnt);
    int rc = xsb_mount_attach(mnt, point);
    xsb_close_keeping_errno(point);
    xsb_close_keeping_errno(mnt);
    return rc;
}

/// A bind of the new root's own directory `target` onto itself: a mount with flags of its own,
/// but no file system of its own. Every superblock registers a memcg-aware shrinker, and the
/// kernel sizes each new memory cgroup by the most of those ever registered at once (1 KiB per
/// 64), so each superblock a sandbox saves makes every sandbox's memory cgroup cheaper.
static int directory_mount_at(int root, const char *target, uint64_t attrs) {
    int point = xsb_mount_point(root, target, 1);
    if (point < 0) return -1;
    int tree = (int)syscall(SYS_open_tree, point, "", XSB_OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH);
    if (tree < 0) return xsb_close_keeping_errno(point);
    struct xsb_mount_attr attr = {.attr_set = attrs};
    int rc = (int)syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr);
    if (rc == 0) rc = xsb_mount_attach(tree, point);
    xsb_close_keeping_errno(tree);
    xsb_close_keeping_errno(point);
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
    if (mkdirat(parent, leaf, 01777) != 0 && errno != EEXIST) return xsb_close_keeping_errno(parent);
    int dir = openat(parent, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    xsb_close_keeping_errno(parent);
    if (dir < 0) return -1;
    int rc = fchmod(dir, 01777);  // mkdirat's mode passed through the umask
    xsb_close_keeping_errno(dir);
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
    xsb_close_keeping_errno(fs);
    return rc;
}

static int symlink_at(int root, const char *text, const char *target) {
    char leaf[256];
    int parent = open_parent(root, target, leaf, sizeof leaf);
    if (parent < 0) return -1;
    int rc = symlinkat(text, parent, leaf);
    xsb_close_keeping_errno(parent);
    return rc;
}

static int file_at(int root, const char *target, const char *bytes, uint64_t size, uint32_t mode) {
    char leaf[256];
    int parent = open_parent(root, target, leaf, sizeof leaf);
    if (parent < 0) return -1;
    int fd = openat(parent, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    xsb_close_keeping_errno(parent);
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
    int point = xsb_mount_point(root, "/proc", 1);
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

static int apply_op(int root, const struct xsb_spawn_config *cfg, const struct xsb_mount_op *op, int control_fd) {
    switch (op->kind) {
    case XSB_MOUNT_BIND: {
        // A bind with a mask below it is bound back entry by entry (masks.c).
        if (xsb_masks_below(cfg, op)) return xsb_masks_bind(root, cfg, op, control_fd);
        int at_target;
        // A source the supervisor opened as a detached mount (its host path may not be
        // reachable with the sandbox's ids), or a host path below the old root.
        int rc = (op->flags & XSB_MOUNT_F_TREE)
                     ? xsb_mount_attach_bind(root, cfg->mount_trees[op->tree], op->target, op->flags & ~XSB_MOUNT_F_TREE, &at_target)
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
        // Absent on the host: the split of the bind above left out whatever is there by now.
        if (op->flags & XSB_MOUNT_F_ABSENT) return 0;
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
