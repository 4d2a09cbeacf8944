// The system call wrappers the init's objects call, with glibc's prototypes. A payload makes
// some of them after its seccomp filter is loaded (execve, syscall, write, _exit), where the
// policy allows calls by number: those make exactly glibc's system calls (exit_group for
// _exit). Failures return -1 with errno set, as glibc's do.
//
// errno is one int for the whole process: the init has no TLS. Its receiver thread and a
// waiting payload (which share its memory) make raw system calls only once the init runs beside them.
#define _GNU_SOURCE
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int xsb_errno;

int *__errno_location(void) { return &xsb_errno; }

long xsb_rt_result(long ret) {
    if (ret < 0 && ret > -4096) {
        xsb_errno = (int)-ret;
        return -1;
    }
    return ret;
}

#define SYS0(nr) xsb_rt_result(xsb_inline_syscall6(nr, 0, 0, 0, 0, 0, 0))
#define SYS1(nr, a) xsb_rt_result(xsb_inline_syscall6(nr, (long)(a), 0, 0, 0, 0, 0))
#define SYS2(nr, a, b) xsb_rt_result(xsb_inline_syscall6(nr, (long)(a), (long)(b), 0, 0, 0, 0))
#define SYS3(nr, a, b, c) xsb_rt_result(xsb_inline_syscall6(nr, (long)(a), (long)(b), (long)(c), 0, 0, 0))
#define SYS4(nr, a, b, c, d) xsb_rt_result(xsb_inline_syscall6(nr, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0))
#define SYS5(nr, a, b, c, d, e) xsb_rt_result(xsb_inline_syscall6(nr, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0))
#define SYS6(nr, a, b, c, d, e, f) \
    xsb_rt_result(xsb_inline_syscall6(nr, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f)))

// MARK: - Processes

void _exit(int status) {
    xsb_rt_exit_group(status);
}

long syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    return SYS6(nr, a, b, c, d, e, f);
}

pid_t getpid(void) { return (pid_t)SYS0(SYS_getpid); }
pid_t setsid(void) { return (pid_t)SYS0(SYS_setsid); }
int kill(pid_t pid, int sig) { return (int)SYS2(SYS_kill, pid, sig); }
int execve(const char *path, char *const argv[], char *const envp[]) { return (int)SYS3(SYS_execve, path, argv, envp); }
int unshare(int flags) { return (int)SYS1(SYS_unshare, flags); }

int prctl(int option, ...) {
    va_list ap;
    va_start(ap, option);
    unsigned long a = va_arg(ap, unsigned long), b = va_arg(ap, unsigned long);
    unsigned long c = va_arg(ap, unsigned long), d = va_arg(ap, unsigned long);
    va_end(ap);
    return (int)SYS5(SYS_prctl, option, a, b, c, d);
}

int setrlimit(__rlimit_resource_t resource, const struct rlimit *limit) {
    return (int)SYS4(SYS_prlimit64, 0, resource, limit, NULL);
}

pid_t waitpid(pid_t pid, int *status, int options) { return (pid_t)SYS4(SYS_wait4, pid, status, options, NULL); }

int waitid(idtype_t type, id_t id, siginfo_t *info, int options) {
    return (int)SYS5(SYS_waitid, type, id, info, options, NULL);
}

// MARK: - Time

int clock_gettime(clockid_t clock, struct timespec *ts) { return (int)SYS2(SYS_clock_gettime, clock, ts); }
int nanosleep(const struct timespec *duration, struct timespec *left) { return (int)SYS2(SYS_nanosleep, duration, left); }

// MARK: - File descriptors

int close(int fd) { return (int)SYS1(SYS_close, fd); }
ssize_t read(int fd, void *buf, size_t n) { return SYS3(SYS_read, fd, buf, n); }
ssize_t write(int fd, const void *buf, size_t n) { return SYS3(SYS_write, fd, buf, n); }
ssize_t pread(int fd, void *buf, size_t n, off_t offset) { return SYS4(SYS_pread64, fd, buf, n, offset); }
int dup3(int fd, int target, int flags) { return (int)SYS3(SYS_dup3, fd, target, flags); }
int pipe2(int fds[2], int flags) { return (int)SYS2(SYS_pipe2, fds, flags); }

int dup2(int fd, int target) {
#if defined(SYS_dup2)
    return (int)SYS2(SYS_dup2, fd, target);
#else
    // dup3 refuses fd == target, which dup2 answers with fd (if it is open).
    if (fd == target) return (int)SYS2(SYS_fcntl, fd, F_GETFD) < 0 ? -1 : fd;
    return dup3(fd, target, 0);
#endif
}

int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return (int)SYS3(SYS_fcntl, fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...) {
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return (int)SYS3(SYS_ioctl, fd, request, arg);
}

int poll(struct pollfd *fds, nfds_t count, int timeout_ms) {
#if defined(SYS_poll)
    return (int)SYS3(SYS_poll, fds, count, timeout_ms);
#else
    struct timespec ts = {.tv_sec = timeout_ms / 1000, .tv_nsec = (long)(timeout_ms % 1000) * 1000000};
    return (int)SYS5(SYS_ppoll, fds, count, timeout_ms < 0 ? NULL : &ts, NULL, 8);
#endif
}

// MARK: - Memory

void *mmap(void *address, size_t size, int prot, int flags, int fd, off_t offset) {
    return (void *)SYS6(SYS_mmap, address, size, prot, flags, fd, offset);
}

int munmap(void *address, size_t size) { return (int)SYS2(SYS_munmap, address, size); }

// MARK: - Files and directories

/// The mode argument of open and openat: passed only when the call may create the file.
static int open_at(int dir, const char *path, int flags, va_list more) {
    int mode = ((flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE) ? va_arg(more, int) : 0;
    return (int)SYS4(SYS_openat, dir, path, flags, mode);
}

int open(const char *path, int flags, ...) {
    va_list more;
    va_start(more, flags);
    int fd = open_at(AT_FDCWD, path, flags, more);
    va_end(more);
    return fd;
}

int openat(int dir, const char *path, int flags, ...) {
    va_list more;
    va_start(more, flags);
    int fd = open_at(dir, path, flags, more);
    va_end(more);
    return fd;
}

int access(const char *path, int mode) {
#if defined(SYS_access)
    return (int)SYS2(SYS_access, path, mode);
#else
    return (int)SYS3(SYS_faccessat, AT_FDCWD, path, mode);
#endif
}

int faccessat(int dir, const char *path, int mode, int flags) {
    // The kernel's faccessat has no flags; faccessat2 (Linux 5.8) has. Without it, "exists
    // (without following a symbolic link)" is what a stat says; other checks need no flags here.
    long ret = xsb_inline_syscall6(SYS_faccessat2, dir, (long)path, mode, flags, 0, 0);
    if (ret == -ENOSYS) {
        if (flags == 0) return (int)SYS3(SYS_faccessat, dir, path, mode);
        if (mode == F_OK) {
            struct stat st;
            return (int)SYS4(SYS_newfstatat, dir, path, &st, flags & AT_SYMLINK_NOFOLLOW);
        }
    }
    return (int)xsb_rt_result(ret);
}

int fstat(int fd, struct stat *st) {
#if defined(SYS_fstat)
    return (int)SYS2(SYS_fstat, fd, st);
#else
    return (int)SYS4(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH);
#endif
}

int fstatat(int dir, const char *restrict path, struct stat *restrict st, int flags) {
    return (int)SYS4(SYS_newfstatat, dir, path, st, flags);
}

int fstatfs(int fd, struct statfs *st) { return (int)SYS2(SYS_fstatfs, fd, st); }
int fchmod(int fd, mode_t mode) { return (int)SYS2(SYS_fchmod, fd, mode); }
int chdir(const char *path) { return (int)SYS1(SYS_chdir, path); }
int chroot(const char *path) { return (int)SYS1(SYS_chroot, path); }
int mkdirat(int dir, const char *path, mode_t mode) { return (int)SYS3(SYS_mkdirat, dir, path, mode); }
int mkdir(const char *path, mode_t mode) {
#if defined(SYS_mkdir)
    return (int)SYS2(SYS_mkdir, path, mode);
#else
    return mkdirat(AT_FDCWD, path, mode);
#endif
}
int unlinkat(int dir, const char *path, int flags) { return (int)SYS3(SYS_unlinkat, dir, path, flags); }
int symlinkat(const char *text, int dir, const char *path) { return (int)SYS3(SYS_symlinkat, text, dir, path); }

ssize_t readlinkat(int dir, const char *restrict path, char *restrict buf, size_t size) {
    return SYS4(SYS_readlinkat, dir, path, buf, size);
}

int mount(const char *source, const char *target, const char *type, unsigned long flags, const void *data) {
    return (int)SYS5(SYS_mount, source, target, type, flags, data);
}

int umount2(const char *target, int flags) { return (int)SYS2(SYS_umount2, target, flags); }

// MARK: - Names

int sethostname(const char *name, size_t length) { return (int)SYS2(SYS_sethostname, name, length); }
int setdomainname(const char *name, size_t length) { return (int)SYS2(SYS_setdomainname, name, length); }

// MARK: - Sockets

int socket(int domain, int type, int protocol) { return (int)SYS3(SYS_socket, domain, type, protocol); }

int socketpair(int domain, int type, int protocol, int fds[2]) {
    return (int)SYS4(SYS_socketpair, domain, type, protocol, fds);
}

ssize_t send(int fd, const void *buf, size_t n, int flags) { return SYS6(SYS_sendto, fd, buf, n, flags, NULL, 0); }
ssize_t recv(int fd, void *buf, size_t n, int flags) { return SYS6(SYS_recvfrom, fd, buf, n, flags, NULL, NULL); }
ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) { return SYS3(SYS_sendmsg, fd, msg, flags); }
ssize_t recvmsg(int fd, struct msghdr *msg, int flags) { return SYS3(SYS_recvmsg, fd, msg, flags); }

/// CMSG_NXTHDR's out-of-line form (an unoptimized build calls it): glibc's bounds checks.
struct cmsghdr *__cmsg_nxthdr(struct msghdr *msg, struct cmsghdr *cmsg) {
    if ((size_t)cmsg->cmsg_len < sizeof(struct cmsghdr)) return NULL;
    unsigned char *end = (unsigned char *)msg->msg_control + msg->msg_controllen;
    cmsg = (struct cmsghdr *)((unsigned char *)cmsg + CMSG_ALIGN(cmsg->cmsg_len));
    if ((unsigned char *)(cmsg + 1) > end || (unsigned char *)cmsg + CMSG_ALIGN(cmsg->cmsg_len) > end) return NULL;
    return cmsg;
}
