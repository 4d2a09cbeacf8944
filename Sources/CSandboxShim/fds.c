// File descriptors, for every process of a launch: which fds each one holds, and where.
//   supervisor: closed standard fds are filled with /dev/null before anything else runs;
//   clone child: places the init's fds (control socket, description, passed fds, the init
//     itself) and closes every other fd of the supervisor's before its exec;
//   init: keeps its own fds far above the payload's 0, 1, 2, 3…, and nothing else;
//   payload: places the caller's fds at 0, 1, 2, 3… and marks the rest close-on-exec (it shares
//     the init's fd table until its exec, so it never closes one: that would close the init's too);
//     for a payload that waits in a pre-built sandbox the init places them, in the table they share.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/// If the process started with fd 0, 1 or 2 closed, the next file the runtime opens (Dispatch's
/// epoll, a socket…) lands there, and a launch that passes "our stdin" would hand it to the
/// sandbox. Fill closed standard fds with /dev/null before anything else runs.
__attribute__((constructor)) static void xsb_ensure_standard_fds(void) {
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int null = open("/dev/null", O_RDWR);
            if (null >= 0 && null != fd) close(null);  // lowest free is `fd` unless something raced
        }
    }
}

int xsb_place_init_fds(int control_fd, int description_fd, const struct xsb_passed_fds *passed, int init_fd, const char **failed) {
    // Every source first goes above every target, then onto its target; the init's own fd
    // (close-on-exec) right after the last.
    int count = 2 + passed->count;
    int floor = count + 1;
    int moved[2 + (int)(sizeof passed->host / sizeof passed->host[0]) + 1];
    for (int i = 0; i <= count; i++) {
        int source = i == 0 ? control_fd : i == 1 ? description_fd
                   : i == count ? init_fd : passed->host[i - 2];
        moved[i] = fcntl(source, F_DUPFD_CLOEXEC, floor);
        if (moved[i] < 0) {
            *failed = "moving the init's fds";
            return -1;
        }
    }
    for (int i = 0; i <= count; i++) {
        if (syscall(SYS_dup3, moved[i], i, i == count ? O_CLOEXEC : 0) < 0) {
            *failed = "placing the init's fds";
            return -1;
        }
    }
    if (syscall(SYS_close_range, (unsigned)floor, ~0U, 0) != 0) {
        *failed = "close_range";
        return -1;
    }
    return count;
}

int xsb_init_move_high(const struct xsb_spawn_config *cfg, int control_fd, int fd, const char *what) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, XSB_FD_FLOOR + (int)cfg->extra_fd_count);
    if (high < 0) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, what);
    close(fd);
    return high;
}

int xsb_init_lift_control_socket(const struct xsb_spawn_config *cfg, int control_fd) {
    int high = fcntl(control_fd, F_DUPFD_CLOEXEC, XSB_FD_FLOOR + (int)cfg->extra_fd_count);
    if (high < 0) xsb_init_fail(control_fd, XSB_STEP_FILE_DESCRIPTORS, errno, "control socket");
    close(control_fd);
    return high;
}

/// Closes every fd except the `count` in `keep` (unsorted; negative entries are ignored).
/// Returns 0, or the errno of a close_range that failed.
static int close_all_except(int *keep, size_t count) {
    for (size_t i = 1; i < count; i++) {  // insertion sort: a handful of numbers
        int v = keep[i];
        size_t j = i;
        while (j > 0 && keep[j - 1] > v) {
            keep[j] = keep[j - 1];
            j--;
        }
        keep[j] = v;
    }
    unsigned next = 0;
    for (size_t i = 0; i < count; i++) {
        if (keep[i] < 0 || (unsigned)keep[i] < next) continue;
        if ((unsigned)keep[i] > next && syscall(SYS_close_range, next, (unsigned)keep[i] - 1, 0) != 0) return errno;
        next = (unsigned)keep[i] + 1;
    }
    return syscall(SYS_close_range, next, ~0U, 0) == 0 ? 0 : errno;
}

void xsb_init_keep_only(int control_fd, int *keep, size_t count) {
    int err = close_all_except(keep, count);
    if (err != 0) xsb_init_fail(control_fd, XSB_STEP_FILE_DESCRIPTORS, err, "close_range");
}

void xsb_init_keep_only_sources(const struct xsb_spawn_config *cfg, int control_fd) {
    int keep[3 + XSB_MAX_EXTRA_FDS + 2];
    size_t count = 0;
    keep[count++] = control_fd;
    for (int i = 0; i < 3; i++) keep[count++] = cfg->stdio[i];
    for (size_t i = 0; i < cfg->extra_fd_count && i < XSB_MAX_EXTRA_FDS; i++) keep[count++] = cfg->extra_fds[i];
    keep[count++] = cfg->exec_fd;
    xsb_init_keep_only(control_fd, keep, count);
}

/// Whether the open file `fd` starts with "#!" (read at offset 0, the fd's position untouched).
static int is_script(int fd) {
    char head[2];
    return pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && head[0] == '#' && head[1] == '!';
}

/// Places the caller's chosen fds at 0, 1, 2, 3… and marks every other fd close-on-exec, in
/// the fd table the payload will exec with. Sources first move above every target so that no
/// dup2 overwrites a later source. Returns the fd to exec the program by (or -1: by path), or
/// -2 with errno set and `*failed` naming what failed.
static int place_payload_fds(const struct xsb_spawn_config *cfg, const char **failed) {
    size_t count = 3 + cfg->extra_fd_count;
    int floor = XSB_FD_FLOOR + (int)cfg->extra_fd_count;
    int moved[3 + XSB_MAX_EXTRA_FDS];
    if (cfg->extra_fd_count > XSB_MAX_EXTRA_FDS) {
        errno = EMFILE;
        *failed = "too many extra fds";
        return -2;
    }
    for (size_t i = 0; i < count; i++) {
        int src = i < 3 ? cfg->stdio[i] : cfg->extra_fds[i - 3];
        if (src < 0 && (src = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
            *failed = "/dev/null";
            return -2;
        }
        if ((moved[i] = fcntl(src, F_DUPFD_CLOEXEC, floor)) < 0) {
            *failed = "dup";
            return -2;
        }
    }
    // The program's own fd goes out of the way too (its number may be one of the targets).
    int program = -1;
    if (cfg->exec_fd >= 0 && (program = fcntl(cfg->exec_fd, F_DUPFD_CLOEXEC, floor)) < 0) {
        *failed = "dup of the program";
        return -2;
    }
    for (size_t i = 0; i < count; i++) {
        if (dup2(moved[i], (int)i) < 0) {
            *failed = "dup2";
            return -2;
        }
    }
    if (syscall(SYS_close_range, (unsigned)count, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        *failed = "close_range";
        return -2;
    }
    // A script's interpreter reads it as /dev/fd/N after the exec: the fd must survive the exec,
    // at a number that comes right after the payload's own. A binary's stays close-on-exec.
    if (program >= 0 && is_script(program)) {
        if (dup2(program, (int)count) < 0) {
            *failed = "dup2 of the script";
            return -2;
        }
        program = (int)count;
    }
    return program;
}

int xsb_payload_arrange_fds(const struct xsb_spawn_config *cfg, int status_fd) {
    const char *failed = NULL;
    int program = place_payload_fds(cfg, &failed);
    if (program == -2) xsb_payload_fail(status_fd, XSB_STEP_FILE_DESCRIPTORS, failed);
    return program;
}

int xsb_init_place_payload_fds(const struct xsb_spawn_config *cfg, int control_fd) {
    const char *failed = NULL;
    int program = place_payload_fds(cfg, &failed);
    if (program == -2) xsb_init_fail(control_fd, XSB_STEP_FILE_DESCRIPTORS, errno, failed);
    return program;
}

void xsb_payload_take_controlling_terminal(const struct xsb_spawn_config *cfg, int status_fd) {
    if (cfg->controlling_terminal) {
        int fd = 0;
        struct winsize size;  // TIOCGWINSZ succeeds on terminals only (isatty, as a raw ioctl)
        while (fd < 3 && ioctl(fd, TIOCGWINSZ, &size) != 0) fd++;
        if (fd < 3 && ioctl(fd, TIOCSCTTY, 0) != 0) xsb_payload_fail(status_fd, XSB_STEP_SESSION, "TIOCSCTTY");
    }
}
