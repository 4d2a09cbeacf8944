// The sandbox init: PID 1 of the sandbox's PID namespace, a small static program of its own
// (xsb-init, exec'd by the supervisor's clone child: nothing of the supervisor's memory is in
// it). It reads the launch description, builds the sandbox (ids are mapped by the supervisor
// first), starts the payload, and then stays as a tiny reaper that the supervisor commands
// over the control socket. When it exits, the kernel kills every other process of the
// namespace, so "the init is gone" always means "the sandbox is gone".
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

__attribute__((noreturn)) static void die(int control_fd, int step, int err, const char *detail) {
    xsb_child_report(control_fd, step, err, detail);
    _exit(127);
}

/// A new network namespace has only a loopback device, and it is down.
static int bring_up_loopback(void) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    xsb_copy_string(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

static void send_msg3(int control_fd, uint32_t type, int32_t value, int32_t value2) {
    struct xsb_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = type;
    msg.value = value;
    msg.value2 = value2;
    (void)send(control_fd, &msg, sizeof msg, MSG_NOSIGNAL);
}

/// Moves `fd` out of the way of the payload's dup2 onto 0, 1, 2, 3…
static int move_high(const struct xsb_spawn_config *cfg, int control_fd, int fd, const char *what) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, XSB_FD_FLOOR + (int)cfg->extra_fd_count);
    if (high < 0) die(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, what);
    close(fd);
    return high;
}

/// Starts the payload and waits (vfork) until it has exec'd or failed. The payload shares our
/// fd table (CLONE_FILES), so the seccomp listener it creates right before exec appears here,
/// where the receiver thread reads it, while exec leaves the payload a table of its own.
/// Returns the payload's pid; `*listener` is the listener's fd number (-1: none announced).
static pid_t start_payload(const struct xsb_spawn_config *cfg, int control_fd, int announce_fd, int *listener) {
    int status_pipe[2];
    if (pipe2(status_pipe, O_CLOEXEC | O_NONBLOCK) != 0) die(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "pipe2");
    for (int i = 0; i < 2; i++) status_pipe[i] = move_high(cfg, control_fd, status_pipe[i], "status pipe");

    long child = syscall(SYS_clone, CLONE_VFORK | CLONE_FILES | SIGCHLD, 0, NULL, NULL, 0);
    if (child == 0) xsb_payload_main(cfg, announce_fd, status_pipe[1]);
    if (child < 0) die(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "clone");
    xsb_receiver_exec_done();

    // Back here the payload has exec'd or exited: its records say which, and where its
    // listener is.
    *listener = -1;
    struct xsb_payload_status record;
    while (read(status_pipe[0], &record, sizeof record) == (ssize_t)sizeof record) {
        if (record.step == XSB_STEP_NONE) {
            *listener = record.value;
            continue;
        }
        record.detail[sizeof record.detail - 1] = '\0';
        die(control_fd, record.step, record.value, record.detail);
    }
    close(status_pipe[0]);
    close(status_pipe[1]);
    // No error record: it exec'd (or a signal ended it first, which the reaper reports as its exit).
    return (pid_t)child;
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

/// Whether every task (thread) of every process but us is stopped, dead, or a zombie.
/// Raw getdents64 on /proc: nothing here may allocate.
static int every_task_stopped(void) {
    struct linux_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
    };
    char procs[4096], tasks[4096], path[128];
    int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc_fd < 0) return 0;
    int all = 1;
    long n;
    while (all && (n = syscall(SYS_getdents64, proc_fd, procs, sizeof procs)) > 0) {
        for (long off = 0; all && off < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(procs + off);
            off += d->d_reclen;
            if (!is_number(d->d_name) || (d->d_name[0] == '1' && d->d_name[1] == '\0')) continue;
            if (xsb_join_path(path, sizeof path, "/proc/", d->d_name) != 0 || xsb_join_path(path, sizeof path, path, "/task") != 0) continue;
            int task_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (task_fd < 0) continue;  // exited meanwhile
            long m;
            while (all && (m = syscall(SYS_getdents64, task_fd, tasks, sizeof tasks)) > 0) {
                for (long toff = 0; all && toff < m;) {
                    struct linux_dirent64 *t = (struct linux_dirent64 *)(tasks + toff);
                    toff += t->d_reclen;
                    if (!is_number(t->d_name)) continue;
                    char stat_path[192];
                    if (xsb_join_path(stat_path, sizeof stat_path, path, "/") != 0 ||
                        xsb_join_path(stat_path, sizeof stat_path, stat_path, t->d_name) != 0 ||
                        xsb_join_path(stat_path, sizeof stat_path, stat_path, "/stat") != 0) continue;
                    char state = task_state(stat_path);
                    if (state != 'T' && state != 't' && state != 'Z' && state != 'X') all = 0;
                }
            }
            close(task_fd);
        }
    }
    close(proc_fd);
    return all;
}

/// Stops every other process of the namespace, and verifies it: a process that was just
/// sending SIGCONT to a sibling when the stop went out could have woken it again.
static int stop_everything(void) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 200000};
    for (int round = 0; round < 500; round++) {
        if (kill(-1, SIGSTOP) != 0 && errno != ESRCH) return errno;
        for (int look = 0; look < 5; look++) {
            if (every_task_stopped()) return 0;
            nanosleep(&pause, NULL);
        }
    }
    return EAGAIN;
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

/// Before the payload starts, keep only the control socket and the fds the payload will
/// receive (the cgroup `tasks` files are done with), so nothing else can reach it and none
/// counts against its limits.
static void close_all_but_sources(const struct xsb_spawn_config *cfg, int control_fd) {
    int keep[3 + 32 + 1];
    size_t count = 0;
    keep[count++] = control_fd;
    for (int i = 0; i < 3; i++) keep[count++] = cfg->stdio[i];
    for (size_t i = 0; i < cfg->extra_fd_count && i < 32; i++) keep[count++] = cfg->extra_fds[i];
    int err = close_all_except(keep, count);
    if (err != 0) die(control_fd, XSB_STEP_FILE_DESCRIPTORS, err, "close_range");
}

/// Waits for one message of `type` from the supervisor; EOF (the supervisor died) or anything
/// else fails.
static int wait_for(int control_fd, uint32_t type) {
    struct xsb_msg msg;
    ssize_t n;
    do {
        n = recv(control_fd, &msg, sizeof msg, 0);
    } while (n < 0 && errno == EINTR);
    return (n == (ssize_t)sizeof msg && msg.type == type) ? 0 : -1;
}

static int64_t monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/// The supervisor is gone: take the sandbox down with it. SIGKILL first: our exit closes the
/// seccomp listener, which would answer a waiting call with ENOSYS and let it run on.
__attribute__((noreturn)) static void supervisor_gone(void) {
    (void)kill(-1, SIGKILL);
    _exit(1);
}

/// Serves the supervisor until the payload has ended. Then the sandbox ends: what the payload
/// left is killed, and once the receiver thread has seen the last user of the filter go (so
/// that a call it stopped in those last moments is still reported), the exit is reported and
/// the init exits, which ends the PID namespace.
__attribute__((noreturn)) static void serve(int control_fd, pid_t payload, int finished_fd, int listener) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    // Every signal is still blocked (inherited from the parent), so SIGCHLD queues for the fd.
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) _exit(127);

    struct pollfd fds[4] = {
        {.fd = control_fd, .events = POLLIN},
        {.fd = sfd, .events = POLLIN},
        {.fd = finished_fd, .events = POLLIN},
        // Once the payload has ended: the filter's last user gone (a hang-up).
        {.fd = -1, .events = 0},
    };
    int receiver_finished = 0, payload_ended = 0, payload_status = 0, filter_unused = 0;
    int64_t deadline = 0;
    for (;;) {
        int timeout = -1;
        if (payload_ended) {
            int64_t now = monotonic_ms();
            if (receiver_finished || now >= deadline) {
                send_msg3(control_fd, XSB_MSG_EXIT, payload_status, 0);
                // Our exit ends the namespace.
                _exit(0);
            }
            timeout = (int)(deadline - now);
            if (filter_unused) {
                // Before Linux 6.11 the receiver's RECV does not return when the filter loses
                // its last user: interrupt it, and again each millisecond (it may have been
                // busy, not yet blocked, when the signal came).
                xsb_receiver_wake();
                timeout = 1;
            }
        }
        if (poll(fds, 4, timeout) < 0) {
            if (errno == EINTR) continue;
            _exit(127);
        }
        if (fds[2].revents & POLLIN) receiver_finished = 1;
        if (fds[3].revents & POLLHUP) {
            filter_unused = 1;
            fds[3].fd = -1;
        }
        if (fds[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {}
            int status;
            pid_t p;
            while ((p = waitpid(-1, &status, WNOHANG | __WALL)) > 0) {
                if (p == payload && !payload_ended) {
                    payload_ended = 1;
                    payload_status = status;
                    // The sandbox ends with its program. Kill what it left now, so that the
                    // filter's last user goes and the receiver can finish; wait at most 1 s.
                    (void)kill(-1, SIGKILL);
                    deadline = monotonic_ms() + 1000;
                    fds[3].fd = listener;
                }
            }
        }
        if (fds[0].revents & POLLIN) {
            struct xsb_msg msg;
            ssize_t n = recv(control_fd, &msg, sizeof msg, 0);
            if (n == 0) supervisor_gone();
            if (n != (ssize_t)sizeof msg) continue;
            int err = 0;
            switch (msg.type) {
            case XSB_MSG_SUSPEND:
                // kill(-1) from PID 1 reaches every other process of the namespace, including
                // ones being forked right now (the kernel delivers it to new children too);
                // the acknowledgement waits until every task is seen stopped.
                err = stop_everything();
                send_msg3(control_fd, XSB_MSG_ACK, XSB_MSG_SUSPEND, err);
                break;
            case XSB_MSG_RESUME:
                if (kill(-1, SIGCONT) != 0 && errno != ESRCH) err = errno;
                send_msg3(control_fd, XSB_MSG_ACK, XSB_MSG_RESUME, err);
                break;
            case XSB_MSG_SIGNAL:
                if (msg.value > 0 && msg.value < 65 && kill(-payload, msg.value) != 0) err = errno;
                send_msg3(control_fd, XSB_MSG_ACK, XSB_MSG_SIGNAL, err);
                break;
            default:
                break;
            }
        } else if (fds[0].revents & (POLLHUP | POLLERR)) {
            supervisor_gone();
        }
    }
}

/// Every signal back to its default action: the init inherits the supervisor's ignored
/// signals through exec (SwiftNIO ignores SIGPIPE; a SIGCHLD ignored would reap the payload
/// behind our back). Every signal stays blocked (inherited too): SIGCHLD is read from a
/// signalfd, and the payload unblocks its own right before its exec.
static void reset_signals(void) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) (void)sigaction(sig, &dfl, NULL);
    }
    sigset_t all;
    sigfillset(&all);
    (void)sigprocmask(SIG_SETMASK, &all, NULL);
}

/// The launch as the supervisor described it (launch_description.c), pointing into the
/// description's mapping.
static struct xsb_spawn_config config;

void xsb_init_run(void) {
    int control_fd = XSB_INIT_CONTROL_FD;
    reset_signals();
    // The parent-death signal is bound to the spawner thread, which lives as long as the
    // supervisor. If the parent died before this line, the handshake below reads EOF.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) die(control_fd, XSB_STEP_PARENT_DEATH_SIGNAL, errno, "prctl");
    // What ps shows (exec by fd names the process after the fd's number).
    (void)prctl(PR_SET_NAME, "xsb-init", 0, 0, 0);

    // Read and check the description while the supervisor writes our id maps.
    const char *refused = NULL;
    if (xsb_description_load(XSB_INIT_DESCRIPTION_FD, &config, &refused) != 0)
        die(control_fd, XSB_STEP_LAUNCH_DESCRIPTION, errno, refused);
    close(XSB_INIT_DESCRIPTION_FD);  // the mapping stays
    const struct xsb_spawn_config *cfg = &config;

    if (wait_for(control_fd, XSB_MSG_GO) != 0) _exit(127);
    // Nothing of the program runs before the init is in the sandbox's cgroups (children
    // inherit them). "0" moves the writing task itself; the init has a single thread.
    for (int i = 0; i < 4; i++) {
        int fd = cfg->cgroup_tasks_fds[i];
        if (fd >= 0 && write(fd, "0", 1) != 1) die(control_fd, XSB_STEP_CGROUP_ATTACH, errno, "tasks");
    }
    // Become the one id the user namespace maps (a no-op for an unprivileged caller): a root
    // caller's init is still host uid 0, which maps to nothing here and must never create a
    // file. Raw calls, as everywhere the receiver thread (which glibc does not know) may run.
    // Capabilities stay (uid 0 of this namespace is unmapped, so no root-to-user transition).
    if (syscall(SYS_setresgid, cfg->gid_inside, cfg->gid_inside, cfg->gid_inside) != 0) die(control_fd, XSB_STEP_USERNS_MAP, errno, "setresgid");
    if (syscall(SYS_setresuid, cfg->uid_inside, cfg->uid_inside, cfg->uid_inside) != 0) die(control_fd, XSB_STEP_USERNS_MAP, errno, "setresuid");
    // A change of the effective ids (a root caller's: host uid 0 to 65534) clears the
    // parent-death signal: set it again. (Had the supervisor died in between, the control
    // socket's hang-up ends the sandbox in serve().)
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) die(control_fd, XSB_STEP_PARENT_DEATH_SIGNAL, errno, "prctl");
    // Non-dumpable before anything of the sandbox runs: the program inside cannot read the
    // init's memory or take its fds (the control socket, the listener) through /proc. Not
    // before GO: the supervisor writes our /proc/PID/uid_map, which non-dumpable would make
    // root's; not before setresuid, which resets the flag to fs.suid_dumpable when the uid changes.
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die(control_fd, XSB_STEP_INIT_PRIVACY, errno, "PR_SET_DUMPABLE");
    if (sethostname(cfg->hostname, xsb_string_length(cfg->hostname)) != 0) die(control_fd, XSB_STEP_HOSTNAME, errno, cfg->hostname);
    if (setdomainname("none", 4) != 0) die(control_fd, XSB_STEP_HOSTNAME, errno, "domainname");
    if (bring_up_loopback() != 0) die(control_fd, XSB_STEP_LOOPBACK, errno, "lo");
    if (xsb_setup_mounts(cfg, control_fd) != 0) _exit(127);

    // The cgroup namespace is rooted in the sandbox's cgroup, which the init joined above.
    // Kernels without cgroup namespaces say EINVAL: that one step is optional by design.
    if (unshare(CLONE_NEWCGROUP) != 0 && errno != EINVAL) die(control_fd, XSB_STEP_CGROUP_NAMESPACE, errno, "unshare");

    // The payload shares our fd table until exec and places its fds at 0, 1, 2, 3…: keep the
    // control socket far above them.
    int high = fcntl(control_fd, F_DUPFD_CLOEXEC, XSB_FD_FLOOR + (int)cfg->extra_fd_count);
    if (high < 0) die(control_fd, XSB_STEP_FILE_DESCRIPTORS, errno, "control socket");
    close(control_fd);
    control_fd = high;

    close_all_but_sources(cfg, control_fd);

    // The receiver thread: it must be reading the payload's listener before the payload's
    // execve, which the filter may hand to it. The last thing created before the payload:
    // the init's own cgroup moves and namespace changes above need a single thread.
    int announce[2], finished[2];
    if (pipe2(announce, O_CLOEXEC) != 0 || pipe2(finished, O_CLOEXEC | O_NONBLOCK) != 0)
        die(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "pipe2");
    for (int i = 0; i < 2; i++) {
        announce[i] = move_high(cfg, control_fd, announce[i], "receiver pipe");
        finished[i] = move_high(cfg, control_fd, finished[i], "receiver pipe");
    }
    if (xsb_receiver_start(cfg, control_fd, announce[0], finished[1]) != 0)
        die(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "seccomp notification receiver thread");

    int listener = -1;
    pid_t payload = start_payload(cfg, control_fd, announce[1], &listener);
    // The init must not hold the caller's stdio (or the payload's copies of it) or anything
    // else for the lifetime of the sandbox: only the control socket, the receiver's pipes and
    // the listener stay. Nothing else may stay open: fail closed.
    {
        int keep[5] = {control_fd, announce[0], finished[0], finished[1], listener};
        int err = close_all_except(keep, 5);
        if (err != 0) die(control_fd, XSB_STEP_FILE_DESCRIPTORS, err, "close_range");
    }
    xsb_description_unload();
    send_msg3(control_fd, XSB_MSG_READY, payload, 0);
    serve(control_fd, payload, finished[0], listener);
}
