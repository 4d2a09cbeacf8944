// The control channel: one SOCK_SEQPACKET socket of struct xsb_msg between the supervisor and
// the sandbox init, both sides. The supervisor releases the init (GO) once the ids are mapped
// and waits for READY or the failing step; afterwards it asks the init to suspend, resume or
// signal the sandbox, and the init acknowledges each request and reports the payload's exit.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "child.h"

// MARK: - Supervisor side

int xsb_send_msg(int control_fd, uint32_t type, int32_t value) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = type;
    msg.value = value;
    for (;;) {
        ssize_t n = send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof msg) return 0;
        if (n < 0 && errno == EINTR) continue;
        return n < 0 ? -errno : -EIO;
    }
}

int xsb_recv_msg(int control_fd, struct xsb_msg *msg) {
    memset(msg, 0, sizeof *msg);
    ssize_t n = recv(control_fd, msg, sizeof *msg, MSG_DONTWAIT);
    if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    if (n == 0) return -EPIPE;
    if ((size_t)n != sizeof *msg) return -EPROTO;
    msg->detail[sizeof msg->detail - 1] = '\0';
    return 1;
}

int xsb_control_poll_launch(int control_fd, struct xsb_spawn_result *out, int *step, int *err, char *detail, size_t detail_size) {
    struct xsb_msg msg;
    for (;;) {
        int got = xsb_recv_msg(control_fd, &msg);
        if (got == 0) return 0;  // nothing more for now
        if (got < 0) {
            *step = XSB_STEP_HANDSHAKE;
            *err = got == -EPIPE ? EPIPE : -got;
            xsb_copy_string(detail, detail_size, got == -EPIPE ? "sandbox init exited" : "control message");
            return -1;
        }
        // During the launch the init's receiver may already report: audit mode's calls
        // (they continued), or a violation by the freshly exec'd program (the sandbox is
        // ending: the launch returns it, and the caller reports how it ended).
        switch (msg.type) {
        case XSB_MSG_AUDITED:
            if (out->audited_count < (int)(sizeof out->audited / sizeof out->audited[0])) out->audited[out->audited_count++] = msg.value;
            continue;
        case XSB_MSG_VIOLATION:
            out->early_violation = msg.value >= 0 ? msg.value : XSB_UNNAMED_VIOLATION;
            return 1;
        case XSB_MSG_READY:
            out->payload_pid = msg.value;
            return 1;
        case XSB_MSG_PREBUILT:
            out->prebuilt = 1;
            return 1;
        case XSB_MSG_ERROR:
            *step = msg.step;
            *err = msg.value;
            xsb_copy_string(detail, detail_size, msg.detail);
            return -1;
        default:
            continue;  // nothing else is the launch's
        }
    }
}

void xsb_control_take_init_report(int control_fd, int *step, int *err, char *detail, size_t detail_size) {
    struct xsb_msg msg;
    if (xsb_recv_msg(control_fd, &msg) == 1 && msg.type == XSB_MSG_ERROR) {
        *step = msg.step;
        *err = msg.value;
        xsb_copy_string(detail, detail_size, msg.detail);
    }
}

// MARK: - Init side

void xsb_child_report(int control_fd, int step, int err, const char *detail) {
    struct xsb_msg msg = {0};
    msg.type = XSB_MSG_ERROR;
    msg.step = step;
    msg.value = err;
    xsb_copy_string(msg.detail, sizeof msg.detail, detail);
    // MSG_NOSIGNAL: the supervisor may already be gone; we must not die of SIGPIPE here.
    (void)send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
}

void xsb_init_fail(int control_fd, int step, int err, const char *detail) {
    xsb_child_report(control_fd, step, err, detail);
    _exit(127);
}

void xsb_control_send(int control_fd, uint32_t type, int32_t value, int32_t value2) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = type;
    msg.value = value;
    msg.value2 = value2;
    (void)send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
}

int xsb_control_wait_for(int control_fd, uint32_t type) {
    struct xsb_msg msg;
    ssize_t n;
    do {
        n = recv(control_fd, &msg, sizeof msg, 0);
    } while (n < 0 && errno == EINTR);
    return (n == (ssize_t)sizeof msg && msg.type == type) ? 0 : -1;
}

/// Reads the state letter of one task from its stat file ("pid (comm) S …"; comm may hold
/// spaces and parentheses, so the state follows the last ')').
static char task_state(const char *stat_path) {
    char buf[512];
    int fd = open(stat_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 'X';  // gone
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 'X';
    char state = '?';
    for (ssize_t i = 0; i + 2 < n; i++) {
        if (buf[i] == ')' && buf[i + 1] == ' ') state = buf[i + 2];
    }
    return state;
}

static int is_number(const char *name) {
    if (*name == '\0') return 0;
    for (; *name; name++) {
        if (*name < '0' || *name > '9') return 0;
    }
    return 1;
}

/// What every task (thread) of every process but us is doing, as far as a suspend cares.
enum sandbox_tasks {
    TASKS_STOPPED,      // every one stopped ('T', 't'), dead or a zombie
    TASKS_STOPPED_OR_WAITING,  // the others wait in the kernel uninterruptibly ('D')
    TASKS_RUNNING,      // at least one may still run (or sleeps interruptibly: not stopped yet)
};

/// Raw getdents64 on /proc: nothing here may allocate.
static enum sandbox_tasks sandbox_tasks(void) {
    struct linux_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
    };
    char procs[4096], tasks[4096], path[128];
    int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc_fd < 0) return TASKS_RUNNING;
    enum sandbox_tasks result = TASKS_STOPPED;
    long n;
    while (result != TASKS_RUNNING && (n = syscall(SYS_getdents64, proc_fd, procs, sizeof procs)) > 0) {
        for (long off = 0; result != TASKS_RUNNING && off < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(procs + off);
            off += d->d_reclen;
            if (!is_number(d->d_name) || (d->d_name[0] == '1' && d->d_name[1] == '\0')) continue;
            if (xsb_join_path(path, sizeof path, "/proc/", d->d_name) != 0 || xsb_join_path(path, sizeof path, path, "/task") != 0) continue;
            int task_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (task_fd < 0) continue;  // exited meanwhile
            long m;
            while (result != TASKS_RUNNING && (m = syscall(SYS_getdents64, task_fd, tasks, sizeof tasks)) > 0) {
                for (long toff = 0; result != TASKS_RUNNING && toff < m;) {
                    struct linux_dirent64 *t = (struct linux_dirent64 *)(tasks + toff);
                    toff += t->d_reclen;
                    if (!is_number(t->d_name)) continue;
                    char stat_path[192];
                    if (xsb_join_path(stat_path, sizeof stat_path, path, "/") != 0 ||
                        xsb_join_path(stat_path, sizeof stat_path, stat_path, t->d_name) != 0 ||
                        xsb_join_path(stat_path, sizeof stat_path, stat_path, "/stat") != 0) continue;
                    char state = task_state(stat_path);
                    if (state == 'D') result = TASKS_STOPPED_OR_WAITING;
                    else if (state != 'T' && state != 't' && state != 'Z' && state != 'X') result = TASKS_RUNNING;
                }
            }
            close(task_fd);
        }
    }
    close(proc_fd);
    return result;
}

/// Stops every other process of the namespace, and verifies it: a process that was just
/// sending SIGCONT to a sibling when the stop went out could have woken it again.
///
/// A task waiting in the kernel uninterruptibly ('D') cannot stop until its wait ends: a vfork
/// parent whose child is stopped waits so until the resume. Once every other task is stopped,
/// none can send SIGCONT any more, so one more SIGSTOP is then pending for each waiting task,
/// and a pending stop is taken before a task runs any more of its own code (on its way back
/// to user space). Such a sandbox counts as suspended.
static int stop_everything(void) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 200000};
    for (int round = 0; round < 500; round++) {
        if (kill(-1, SIGSTOP) != 0 && errno != ESRCH) return errno;
        for (int look = 0; look < 5; look++) {
            enum sandbox_tasks tasks = sandbox_tasks();
            if (tasks == TASKS_STOPPED) return 0;
            if (tasks == TASKS_STOPPED_OR_WAITING) {
                if (kill(-1, SIGSTOP) != 0 && errno != ESRCH) return errno;
                if (sandbox_tasks() != TASKS_RUNNING) return 0;
            }
            nanosleep(&pause, NULL);
        }
    }
    return EAGAIN;
}

int xsb_control_serve_request(int control_fd, pid_t payload) {
    struct xsb_msg msg;
    ssize_t n = recv(control_fd, &msg, sizeof msg, 0);
    if (n == 0) return -1;
    if (n != (ssize_t)sizeof msg) return 0;
    int err = 0;
    switch (msg.type) {
    case XSB_MSG_SUSPEND:
        // kill(-1) from PID 1 reaches every other process of the namespace, including
        // ones being forked right now (the kernel delivers it to new children too);
        // the acknowledgement waits until every task is seen stopped.
        err = stop_everything();
        xsb_control_send(control_fd, XSB_MSG_ACK, XSB_MSG_SUSPEND, err);
        break;
    case XSB_MSG_RESUME:
        if (kill(-1, SIGCONT) != 0 && errno != ESRCH) err = errno;
        xsb_control_send(control_fd, XSB_MSG_ACK, XSB_MSG_RESUME, err);
        break;
    case XSB_MSG_SIGNAL:
        if (msg.value > 0 && msg.value < 65 && kill(-payload, msg.value) != 0) err = errno;
        xsb_control_send(control_fd, XSB_MSG_ACK, XSB_MSG_SIGNAL, err);
        break;
    default:
        break;
    }
    return 0;
}
