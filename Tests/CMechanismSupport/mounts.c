// mounts.c's case: the whole file system of a sandbox, built in namespaces of a forked child's
// own, then looked at from inside.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forked_child.h"

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, xsb_string_length(text));
    close(fd);
    return n == (ssize_t)xsb_string_length(text) ? 0 : -1;
}

/// One line "NAME: RESULT": "ok" when `rc` is 0, else the errno's number.
static void check(struct xsbt_outcome *out, const char *name, int rc) {
    xsbt_append(out->text, sizeof out->text, name);
    xsbt_append(out->text, sizeof out->text, ": ");
    if (rc == 0) xsbt_append(out->text, sizeof out->text, "ok");
    else xsbt_append_number(out->text, sizeof out->text, errno);
    xsbt_append(out->text, sizeof out->text, "\n");
}

/// One line "NAME: TEXT" with the file's first bytes, or the errno's number.
static void check_contents(struct xsbt_outcome *out, const char *path) {
    char text[64];
    int rc = xsbt_read_text(path, text, sizeof text);
    xsbt_append(out->text, sizeof out->text, path);
    xsbt_append(out->text, sizeof out->text, ": ");
    if (rc == 0) xsbt_append(out->text, sizeof out->text, text);
    else xsbt_append_number(out->text, sizeof out->text, -rc);
    xsbt_append(out->text, sizeof out->text, "\n");
}

static int create(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

static int write_one(const char *path) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, "x", 1);
    int saved = errno;
    close(fd);
    errno = saved;
    return n == 1 ? 0 : -1;
}

/// What the sandbox sees, after the mounts are built (the grandchild, PID 1 of its namespace).
static void look_around(struct xsbt_outcome *out) {
    struct statfs root;
    errno = EEXIST;  // (the errno reported when the root is writable)
    check(out, "root read-only", statfs("/", &root) == 0 && (root.f_flags & ST_RDONLY) ? 0 : -1);
    check(out, "mkdir /x", mkdir("/x", 0755));
    check(out, "create /tmp/f", create("/tmp/f"));
    check(out, "create /dev/shm/f", create("/dev/shm/f"));
    check(out, "create /dev/f", create("/dev/f"));
    check(out, "write /dev/null", write_one("/dev/null"));
    check(out, "write /dev/full", write_one("/dev/full"));
    check(out, "write /proc/sys/kernel/hostname", write_one("/proc/sys/kernel/hostname"));
    check(out, "/proc/1/status", access("/proc/1/status", F_OK));
    check(out, "/oldroot", access("/oldroot", F_OK));
    check(out, "/newroot", access("/newroot", F_OK));
    check(out, "/work", access("/work", F_OK));
    check_contents(out, "/data/hello");
    check(out, "create /data/new", create("/data/new"));
    check_contents(out, "/etc/motd");
    check_contents(out, "/link/hello");
    check(out, "create /scratch/f", create("/scratch/f"));
    check(out, "open /masked", open("/masked", O_RDONLY | O_CLOEXEC) >= 0 ? 0 : -1);
    check(out, "create /empty/f", create("/empty/f"));
    // /dev's entries, in the order the directory gives them.
    xsbt_append(out->text, sizeof out->text, "/dev:");
    int dir = open("/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char entries[2048];
    long n;
    while (dir >= 0 && (n = syscall(SYS_getdents64, dir, entries, sizeof entries)) > 0) {
        for (long at = 0; at < n;) {
            const char *name = entries + at + 19;  // struct linux_dirent64's d_name
            unsigned short length;
            __builtin_memcpy(&length, entries + at + 16, sizeof length);
            at += length;
            if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
            xsbt_append(out->text, sizeof out->text, " ");
            xsbt_append(out->text, sizeof out->text, name);
        }
    }
    if (dir >= 0) close(dir);
    xsbt_append(out->text, sizeof out->text, "\n");
}

static int mounts_body(const void *context, struct xsbt_outcome *out) {
    const struct xsb_spawn_config *cfg = context;
    // Root of a user namespace of its own (mapped to the test's own uid 0, the one id a process
    // may map for itself), with a mount namespace and a PID namespace (for /proc) it owns.
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID) != 0 || write_file("/proc/self/setgroups", "deny") != 0 ||
        write_file("/proc/self/uid_map", "0 0 1\n") != 0 || write_file("/proc/self/gid_map", "0 0 1\n") != 0)
        return -errno;
    pid_t init = fork();
    if (init == 0) {
        if (xsb_setup_mounts(cfg, XSBT_FAIL_FD) != 0) _exit(1);
        look_around(out);
        _exit(0);
    }
    if (init < 0) return -errno;
    int status = 0;
    while (waitpid(init, &status, 0) < 0 && errno == EINTR) {}
    return status;
}

int xsbt_setup_mounts(const struct xsb_spawn_config *cfg, struct xsbt_outcome *out) {
    return xsbt_run_forked(mounts_body, NULL, cfg, out);
}
