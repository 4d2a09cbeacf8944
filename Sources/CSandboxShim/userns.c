// The user namespace: which ids the sandbox is. The supervisor writes the new namespace's id
// maps (one id inside for one host id, setgroups denied) while the init waits for GO; the
// init then becomes that one id. A root supervisor's spawner thread drops its supplementary
// groups once, so that no sandbox carries root's.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

// MARK: - Supervisor side

static int write_file(const char *path, const char *text, char *detail, size_t detail_size) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        xsb_copy_string(detail, detail_size, path);
        return -errno;
    }
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    int err = (n == (ssize_t)len) ? 0 : (n < 0 ? errno : EIO);
    close(fd);
    if (err != 0) {
        xsb_copy_string(detail, detail_size, path);
        return -err;
    }
    return 0;
}

int xsb_userns_map_ids(pid_t pid, const struct xsb_spawn_config *cfg, char *detail, size_t size) {
    char path[64], line[64];
    int rc;
    snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
    if ((rc = write_file(path, "deny", detail, size)) != 0) return rc;
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    snprintf(line, sizeof line, "%u %u 1\n", cfg->uid_inside, cfg->uid_outside);
    if ((rc = write_file(path, line, detail, size)) != 0) return rc;
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    snprintf(line, sizeof line, "%u %u 1\n", cfg->gid_inside, cfg->gid_outside);
    return write_file(path, line, detail, size);
}

// The raw system call changes only the calling thread's credentials; glibc's setgroups() would
// change every thread of the process.
int xsb_clear_thread_groups(void) { return syscall(SYS_setgroups, 0, NULL) == 0 ? 0 : errno; }

// MARK: - Init side

void xsb_init_become_mapped_ids(const struct xsb_spawn_config *cfg, int control_fd) {
    if (syscall(SYS_setresgid, cfg->gid_inside, cfg->gid_inside, cfg->gid_inside) != 0) xsb_init_fail(control_fd, XSB_STEP_USERNS_MAP, errno, "setresgid");
    if (syscall(SYS_setresuid, cfg->uid_inside, cfg->uid_inside, cfg->uid_inside) != 0) xsb_init_fail(control_fd, XSB_STEP_USERNS_MAP, errno, "setresuid");
}

void xsb_init_hide_from_sandbox(int control_fd) {
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) xsb_init_fail(control_fd, XSB_STEP_INIT_PRIVACY, errno, "PR_SET_DUMPABLE");
}
