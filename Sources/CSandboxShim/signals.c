// Every signal mechanism of the sandbox, both sides, in one place: the supervisor blocks every
// signal across its clone (so no Swift or NIO handler runs in a child that shares its memory)
// and signals a started init through its pidfd; the init and the payload inherit that mask and
// the supervisor's ignored signals through exec, and reset them; the init reads SIGCHLD from a
// signalfd, binds itself to the supervisor (parent-death signal), stops, continues and kills
// the sandbox (kill(-1) from PID 1 reaches every other process of the namespace), signals the
// payload's process group, and wakes its receiver thread with SIGUSR1.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "child.h"

// MARK: - Supervisor side

void xsb_signals_block_all(sigset_t *saved) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, saved);
}

void xsb_signals_restore(const sigset_t *saved) { pthread_sigmask(SIG_SETMASK, saved, NULL); }

int xsb_pidfd_send_signal(int pidfd, int sig) {
    if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0) return 0;
    return -errno;
}

// MARK: - Init side

/// `sig` back to its default action through the kernel's own call, whatever the C runtime's
/// `sigaction` refuses (glibc's, in the payload of a cold launch, refuses its two internal
/// signals, 32 and 33), since one a host ignores would otherwise stay ignored in the sandbox.
/// All zeros is SIG_DFL, no flags and an empty mask.
static int default_action(int sig) {
    struct xsb_kernel_sigaction dfl = {0};
    return (int)syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
}

void xsb_init_reset_signals(void) {
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) (void)default_action(sig);
    }
    sigset_t all;
    sigfillset(&all);
    (void)sigprocmask(SIG_SETMASK, &all, NULL);
}

void xsb_init_bind_to_supervisor(int control_fd) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) xsb_init_fail(control_fd, XSB_STEP_PARENT_DEATH_SIGNAL, errno, "prctl");
}

int xsb_signals_child_exits(void) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    // Every signal is still blocked (inherited from the parent), so SIGCHLD queues for the fd.
    return signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
}

void xsb_signals_drain(int signal_fd) {
    struct signalfd_siginfo si;
    while (read(signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {}
}

void xsb_signals_kill_sandbox(void) { (void)xsb_raw_syscall(SYS_kill, -1, SIGKILL, 0, 0, 0); }

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
/// sending SIGCONT to a sibling when the stop went out could have woken it again. kill(-1)
/// from PID 1 reaches every other process of the namespace, including ones being forked right
/// now (the kernel delivers it to new children too).
///
/// A task waiting in the kernel uninterruptibly ('D') cannot stop until its wait ends: a vfork
/// parent whose child is stopped waits so until the resume. Once every other task is stopped,
/// none can send SIGCONT any more, so one more SIGSTOP is then pending for each waiting task,
/// and a pending stop is taken before a task runs any more of its own code (on its way back
/// to user space). Such a sandbox counts as suspended.
int xsb_signals_stop_sandbox(void) {
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

int xsb_signals_continue_sandbox(void) {
    if (kill(-1, SIGCONT) != 0 && errno != ESRCH) return errno;
    return 0;
}

int xsb_signals_to_payload(pid_t payload, int sig) {
    // Anything but a signal number is ignored, as a signal 0 would be (nothing is sent).
    if (sig > 0 && sig < 65 && kill(-payload, sig) != 0) return errno;
    return 0;
}

static void wake_up(int sig) { (void)sig; }

int xsb_signals_install_wake(void) {
    // No SA_RESTART: the wake-up interrupts a blocked call. A process of the sandbox may send
    // SIGUSR1 to PID 1 too, which only costs the receiver a loop.
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = wake_up;
    sigfillset(&sa.sa_mask);
    return sigaction(SIGUSR1, &sa, NULL);
}

void xsb_signals_accept_wake(void) {
    uint64_t wake = 1ULL << (SIGUSR1 - 1);
    (void)xsb_raw_syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&wake, 0, 8, 0);
}

void xsb_signals_wake(pid_t tid) {
    if (tid > 0) (void)syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
}

// MARK: - Payload side

void xsb_payload_reset_signals(int status_fd) {
    // Ignored signals stay ignored across exec (SwiftNIO ignores SIGPIPE): reset them all.
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        if (default_action(sig) != 0) xsb_payload_fail(status_fd, XSB_STEP_SIGNALS, "rt_sigaction");
    }
}

void xsb_payload_unblock_signals(int status_fd) {
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) xsb_payload_fail(status_fd, XSB_STEP_SIGNALS, "sigprocmask");
}
