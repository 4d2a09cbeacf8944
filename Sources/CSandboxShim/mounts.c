// The sandbox's file system: a fresh tmpfs root holding only what the policy binds, a fresh
// /proc, a minimal /dev, a size-limited /tmp; then pivot_root with the old root detached.
//
// Technique (as in bubblewrap): mount a tmpfs over /tmp of our private mount namespace and
// pivot into it, so the host's root stays reachable as /oldroot — even /tmp, which the tmpfs
// covered — while /newroot is populated; then pivot a second time into /newroot.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#define MOUNT_ATTR_NOEXEC 0x00000008
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

struct xsb_mount_attr {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

#define OLD "/oldroot"
#define NEW "/newroot"
#define PATH_SIZE 4096

/// Applies flags to a mount and every mount below it. mount_setattr (Linux 5.12) changes only
/// the flags asked for, so it never trips over flags the kernel locked on the host's mounts,
/// and unlike a bind remount it also covers submounts of a recursive bind.
static int set_mount_flags(const char *path, uint64_t attrs, int recursive) {
    struct xsb_mount_attr attr = {.attr_set = attrs};
    return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr, sizeof attr);
}

static int mkdir_p(const char *path, mode_t mode) {
    char buf[PATH_SIZE];
    size_t len = xsb_string_length(path);
    if (len == 0 || len >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    xsb_copy_string(buf, sizeof buf, path);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, mode) != 0 && errno != EEXIST) return -1;
            buf[i] = saved;
        }
    }
    return 0;
}

static int mkdir_parent(const char *path) {
    char buf[PATH_SIZE];
    xsb_copy_string(buf, sizeof buf, path);
    size_t len = xsb_string_length(buf);
    while (len > 0 && buf[len - 1] != '/') len--;
    if (len <= 1) return 0;
    buf[len - 1] = '\0';
    return mkdir_p(buf, 0755);
}

static int create_empty_file(const char *path) {
    if (mkdir_parent(path) != 0) return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

/// "mode=OOOO,size=N" without snprintf (not async-signal-safe).
static void tmpfs_options(char *out, size_t size, uint32_t mode, uint64_t bytes) {
    char digits[32];
    size_t n = 0, pos = 0;
    const char *prefix = "mode=";
    for (size_t i = 0; prefix[i] && pos + 1 < size; i++) out[pos++] = prefix[i];
    do { digits[n++] = (char)('0' + (mode & 7)); mode >>= 3; } while (mode != 0 && n < sizeof digits);
    while (n > 0 && pos + 1 < size) out[pos++] = digits[--n];
    const char *mid = ",size=";
    for (size_t i = 0; mid[i] && pos + 1 < size; i++) out[pos++] = mid[i];
    do { digits[n++] = (char)('0' + bytes % 10); bytes /= 10; } while (bytes != 0 && n < sizeof digits);
    while (n > 0 && pos + 1 < size) out[pos++] = digits[--n];
    out[pos] = '\0';
}

static int mount_tmpfs(const char *path, uint32_t mode, uint64_t bytes, unsigned long flags) {
    char options[96];
    tmpfs_options(options, sizeof options, mode, bytes);
    if (mkdir_p(path, 0755) != 0) return -1;
    return mount("tmpfs", path, "tmpfs", flags, options);
}

static int bind(const char *source, const char *target, int flags) {
    char src[PATH_SIZE], dst[PATH_SIZE];
    if (xsb_join_path(src, sizeof src, OLD, source) != 0 || xsb_join_path(dst, sizeof dst, NEW, target) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int made = (flags & XSB_MOUNT_F_DIRECTORY) ? mkdir_p(dst, 0755) : create_empty_file(dst);
    if (made != 0) return -1;
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0) return -1;
    uint64_t attrs = MOUNT_ATTR_NOSUID;
    if (flags & XSB_MOUNT_F_DEVICE) attrs |= MOUNT_ATTR_NOEXEC;
    else attrs |= MOUNT_ATTR_NODEV;
    if (!(flags & XSB_MOUNT_F_WRITABLE) && !(flags & XSB_MOUNT_F_DEVICE)) attrs |= MOUNT_ATTR_RDONLY;
    return set_mount_flags(dst, attrs, 1);
}

/// null, zero, full, random, urandom bound from the host (a user namespace cannot mknod);
/// nothing else: no disks, no kmsg, no mem, no tty.
static int setup_dev(const struct xsb_spawn_config *cfg, int control_fd) {
    static const char *const nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
    static const char *const links[][2] = {
        {"/proc/self/fd", NEW "/dev/fd"},       {"/proc/self/fd/0", NEW "/dev/stdin"},
        {"/proc/self/fd/1", NEW "/dev/stdout"}, {"/proc/self/fd/2", NEW "/dev/stderr"},
    };
    if (mount_tmpfs(NEW "/dev", 0755, 64 * 1024, MS_NOSUID | MS_NOEXEC) != 0) {
        xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, "/dev");
        return -1;
    }
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        if (bind(nodes[i], nodes[i], XSB_MOUNT_F_DEVICE) != 0) {
            xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, nodes[i]);
            return -1;
        }
    }
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        if (symlink(links[i][0], links[i][1]) != 0) {
            xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, links[i][1] + sizeof NEW - 1);
            return -1;
        }
    }
    if (mount_tmpfs(NEW "/dev/shm", 01777, cfg->shm_size, MS_NOSUID | MS_NODEV | MS_NOEXEC) != 0) {
        xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, "/dev/shm");
        return -1;
    }
    if (set_mount_flags(NEW "/dev", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, 0) != 0) {
        xsb_child_report(control_fd, XSB_STEP_DEV_SETUP, errno, "/dev read-only");
        return -1;
    }
    return 0;
}

/// A fresh procfs for the new PID namespace, with the knobs that outlive the sandbox
/// (sysctls, sysrq, irq and bus settings) made read-only on top of the user-namespace checks.
static int setup_proc(int control_fd) {
    static const char *const protect[] = {NEW "/proc/sys", NEW "/proc/sysrq-trigger", NEW "/proc/irq", NEW "/proc/bus"};
    if (mkdir_p(NEW "/proc", 0555) != 0 ||
        mount("proc", NEW "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
        xsb_child_report(control_fd, XSB_STEP_PROC_MOUNT, errno, "/proc");
        return -1;
    }
    for (size_t i = 0; i < sizeof protect / sizeof protect[0]; i++) {
        if (mount(protect[i], protect[i], NULL, MS_BIND | MS_REC, NULL) != 0) {
            if (errno == ENOENT) continue;
            xsb_child_report(control_fd, XSB_STEP_PROC_MOUNT, errno, protect[i] + sizeof NEW - 1);
            return -1;
        }
        if (set_mount_flags(protect[i], MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, 1) != 0) {
            xsb_child_report(control_fd, XSB_STEP_PROC_MOUNT, errno, protect[i] + sizeof NEW - 1);
            return -1;
        }
    }
    return 0;
}

static int apply_op(const struct xsb_mount_op *op, int control_fd) {
    char dst[PATH_SIZE];
    if (xsb_join_path(dst, sizeof dst, NEW, op->target) != 0) {
        xsb_child_report(control_fd, XSB_STEP_BIND_MOUNT, ENAMETOOLONG, op->target);
        return -1;
    }
    switch (op->kind) {
    case XSB_MOUNT_BIND:
        if (bind(op->source, op->target, op->flags) == 0) return 0;
        xsb_child_report(control_fd, XSB_STEP_BIND_MOUNT, errno, op->source);
        return -1;
    case XSB_MOUNT_TMPFS:
        if (mount_tmpfs(dst, op->mode ? op->mode : 01777, op->size, MS_NOSUID | MS_NODEV) == 0) return 0;
        xsb_child_report(control_fd, XSB_STEP_TMPFS_MOUNT, errno, op->target);
        return -1;
    case XSB_MOUNT_SYMLINK:
        if (mkdir_parent(dst) == 0 && symlink(op->source, dst) == 0) return 0;
        xsb_child_report(control_fd, XSB_STEP_SYMLINK, errno, op->target);
        return -1;
    case XSB_MOUNT_FILE: {
        if (mkdir_parent(dst) != 0) break;
        int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, op->mode ? op->mode : 0644);
        if (fd < 0) break;
        ssize_t n = write(fd, op->source, (size_t)op->size);
        int saved = errno;
        close(fd);
        if (n == (ssize_t)op->size) return 0;
        errno = n < 0 ? saved : EIO;
        break;
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
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m,nr_inodes=16384") != 0 ||
        chdir("/tmp") != 0 || mkdir("newroot", 0755) != 0 || mkdir("oldroot", 0755) != 0 ||
        mount("newroot", "newroot", NULL, MS_BIND, NULL) != 0) {
        xsb_child_report(control_fd, XSB_STEP_ROOT_TMPFS, errno, "/tmp");
        return -1;
    }
    if (syscall(SYS_pivot_root, ".", "oldroot") != 0 || chdir("/") != 0) {
        xsb_child_report(control_fd, XSB_STEP_PIVOT_ROOT, errno, "first pivot");
        return -1;
    }

    if (setup_proc(control_fd) != 0 || setup_dev(cfg, control_fd) != 0) return -1;
    if (mount_tmpfs(NEW "/tmp", 01777, cfg->tmp_size, MS_NOSUID | MS_NODEV) != 0) {
        xsb_child_report(control_fd, XSB_STEP_TMPFS_MOUNT, errno, "/tmp");
        return -1;
    }
    for (size_t i = 0; i < cfg->mount_count; i++) {
        if (apply_op(&cfg->mounts[i], control_fd) != 0) return -1;
    }

    // Everything outside the explicit writable mounts is read-only, the root included.
    if (mount(NEW, NEW, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) {
        xsb_child_report(control_fd, XSB_STEP_ROOT_READONLY, errno, "/");
        return -1;
    }
    if (umount2(OLD, MNT_DETACH) != 0) {
        xsb_child_report(control_fd, XSB_STEP_PIVOT_ROOT, errno, "detach old root");
        return -1;
    }
    if (chdir(NEW) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) {
        xsb_child_report(control_fd, XSB_STEP_PIVOT_ROOT, errno, "second pivot");
        return -1;
    }
    return 0;
}
