/*
 * xsb-probe - a hostile test fixture that runs INSIDE an extsandbox sandbox.
 *
 * Usage:  xsb-probe CHECK [ARGS...]     run exactly one check
 *         xsb-probe list                every check with its expectation
 *         xsb-probe tools               the helper programs (not assertions)
 *         xsb-probe help                usage
 *
 * Exactly ONE forbidden attempt per invocation: under the standard policy a
 * seccomp violation kills the whole process, so a second attempt would never
 * run.  Each invocation prints one result line on stdout:
 *
 *     CHECK: blocked (ERRNO_NAME) [detail]  exit 0  the forbidden thing failed
 *     CHECK: ok <detail>                    exit 0  the observation holds
 *     CHECK: ESCAPED <detail>               exit 1  the forbidden thing worked /
 *                                                   an isolation property is missing
 *     CHECK: FAILED <detail>                exit 1  an ok-check could not be made to
 *                                                   hold for a non-isolation reason
 *                                                   (e.g. /tmp not writable)
 *     usage errors go to stderr             exit 2
 *
 * `list` prints one line per check:
 *     NAME kill SYSCALL   the call must never return: under the standard policy
 *                         the process is killed by seccomp and the supervisor
 *                         names SYSCALL.  If the call returns anyway, the probe
 *                         prints blocked/ESCAPED according to its result.
 *     NAME blocked        expected to fail with an errno / be absent; exit 0
 *     NAME ok             an observation that must hold; exit 0
 *     NAME sigsys         a foreign-ABI system call (x32, i386 `int $0x80`): the
 *                         filter kills the process with SIGSYS before any syscall
 *                         number is looked up, so the supervisor may not be able
 *                         to name a syscall.  Outside a sandbox it prints
 *                         blocked (exit 0) when the kernel lacks that ABI.
 *
 * Checks that could harm a host (mount, umount2, pivot_root, reboot, kexec_load,
 * swapon, acct, kill-host, memory-bomb, fork-bomb, tmp-fill) refuse to run (exit 2) when
 * the probe is in the initial user or PID namespace, i.e. clearly not inside a
 * sandbox.  XSB_PROBE_UNSAFE=1 overrides that guard.
 *
 * Build: SwiftPM target `xsb-probe`, or
 *        cc -O2 -Wall -Wextra -o xsb-probe Tests/Fixtures/xsb-probe/main.c
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/quota.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/seccomp.h>

/* Syscall numbers newer than some libc headers.  Since Linux 5.1 new syscalls
 * share one number on every architecture (asm-generic unified table). */
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef PR_GET_MDWE
#define PR_GET_MDWE 66
#endif
#ifndef MAX_HANDLE_SZ
#define MAX_HANDLE_SZ 128
#endif

/* Inode numbers the kernel gives the initial namespaces (include/linux/proc_ns.h). */
#define PROC_USER_INIT_INO 0xEFFFFFFDU
#define PROC_PID_INIT_INO 0xEFFFFFFCU

extern char **environ;

/* ------------------------------------------------------------------------ */
/* Reporting                                                                 */
/* ------------------------------------------------------------------------ */

static const char *g_check = "xsb-probe"; /* name of the running check */

static const char *errno_name(int err)
{
    switch (err) {
#define E(x) case x: return #x
    E(EPERM); E(ENOENT); E(ESRCH); E(EINTR); E(EIO); E(ENXIO); E(E2BIG);
    E(ENOEXEC); E(EBADF); E(ECHILD); E(EAGAIN); E(ENOMEM); E(EACCES);
    E(EFAULT); E(ENOTBLK); E(EBUSY); E(EEXIST); E(EXDEV); E(ENODEV);
    E(ENOTDIR); E(EISDIR); E(EINVAL); E(ENFILE); E(EMFILE); E(ENOTTY);
    E(ETXTBSY); E(EFBIG); E(ENOSPC); E(ESPIPE); E(EROFS); E(EMLINK);
    E(EPIPE); E(EDOM); E(ERANGE); E(EDEADLK); E(ENAMETOOLONG); E(ENOLCK);
    E(ENOSYS); E(ENOTEMPTY); E(ELOOP); E(ENOMSG); E(EIDRM); E(ENODATA);
    E(ENOKEY); E(EKEYEXPIRED); E(EKEYREVOKED); E(EKEYREJECTED);
    E(EOVERFLOW); E(EBADFD); E(EUSERS); E(ENOTSOCK); E(EDESTADDRREQ);
    E(EMSGSIZE); E(EPROTOTYPE); E(ENOPROTOOPT); E(EPROTONOSUPPORT);
    E(ESOCKTNOSUPPORT); E(EOPNOTSUPP); E(EPFNOSUPPORT); E(EAFNOSUPPORT);
    E(EADDRINUSE); E(EADDRNOTAVAIL); E(ENETDOWN); E(ENETUNREACH);
    E(ENETRESET); E(ECONNABORTED); E(ECONNRESET); E(ENOBUFS); E(EISCONN);
    E(ENOTCONN); E(ETIMEDOUT); E(ECONNREFUSED); E(EHOSTDOWN);
    E(EHOSTUNREACH); E(EALREADY); E(EINPROGRESS); E(ESTALE); E(EDQUOT);
    E(ECANCELED); E(EOWNERDEAD); E(ENOTRECOVERABLE); E(ERFKILL);
    E(EHWPOISON); E(ENOMEDIUM); E(EMEDIUMTYPE);
#undef E
    default: {
        static char buf[32];
        snprintf(buf, sizeof buf, "ERRNO_%d", err);
        return buf;
    }
    }
}

static void vreport(const char *verdict, const char *fmt, va_list ap)
{
    printf("%s: %s", g_check, verdict);
    if (fmt && *fmt) {
        putchar(' ');
        vprintf(fmt, ap);
    }
    putchar('\n');
    fflush(stdout);
}

/* Prints the verdict and the optional detail, then returns `result` from the
 * variadic reporting function it is used in (whose last named parameter is fmt). */
#define REPORT(verdict, result)                                                \
    do {                                                                       \
        va_list ap;                                                            \
        va_start(ap, fmt);                                                     \
        vreport((verdict), fmt, ap);                                           \
        va_end(ap);                                                            \
        return (result);                                                       \
    } while (0)

/* Like blocked() but with a word instead of an errno, e.g. "blocked (empty)". */
static int blocked_word(const char *word, const char *fmt, ...)
{
    char verdict[64];
    snprintf(verdict, sizeof verdict, "blocked (%s)", word);
    REPORT(verdict, 0);
}

/* The forbidden thing failed with `err`.  Optional detail after the errno. */
static int blocked(int err, const char *fmt, ...)
{
    char verdict[64];
    snprintf(verdict, sizeof verdict, "blocked (%s)", errno_name(err));
    REPORT(verdict, 0);
}

static int ok(const char *fmt, ...) { REPORT("ok", 0); }

static int escaped(const char *fmt, ...) { REPORT("ESCAPED", 1); }

static int failed(const char *fmt, ...) { REPORT("FAILED", 1); }

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "xsb-probe: %s: ", g_check);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* Verdict for a call that should have been killed by seccomp but returned. */
static int returned(long rc)
{
    if (rc == -1)
        return blocked(errno, NULL);
    return escaped("returned %ld", rc);
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

/* Appends `sep` (unless the list is empty) and the formatted text to the list of
 * *len bytes in out[0..size), cut at the end of out: *len stays below size. */
static void list_append(char *out, size_t size, size_t *len, const char *sep, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (*len)
        *len += (size_t)snprintf(out + *len, size - *len, "%s", sep);
    if (*len < size)
        *len += (size_t)vsnprintf(out + *len, size - *len, fmt, ap);
    va_end(ap);
    if (*len >= size)
        *len = size - 1;
}

/* Counts the entries of the directory `d` that `wanted` accepts and lists their
 * names in out (cut to fit); closes d. */
static int list_entries(DIR *d, int (*wanted)(const char *name), char *out, size_t size)
{
    size_t len = 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!wanted(e->d_name))
            continue;
        n++;
        list_append(out, size, &len, " ", "%s", e->d_name);
    }
    closedir(d);
    return n;
}

static int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static void sleep_seconds(double seconds)
{
    struct timespec ts = {(time_t)seconds,
                          (long)((seconds - (double)(time_t)seconds) * 1e9)};
    /* Restart after signals (SIGSTOP/SIGCONT during a suspend test). */
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static double now_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Value of "Key:" in /proc/self/status, copied into out (trimmed). */
static int proc_status_field(const char *key, char *out, size_t outlen)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return -1;
    char line[512];
    size_t klen = strlen(key);
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            char *v = line + klen + 1;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(out, outlen, "%s", v);
            found = 0;
            break;
        }
    }
    fclose(f);
    if (found)
        errno = ENOENT;
    return found;
}

/* Inode of a /proc/self/ns/X link ("user:[4026531837]"), 0 if unknown. */
static unsigned long ns_inode(const char *ns)
{
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/ns/%s", ns);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    char *lb = strchr(target, '[');
    return lb ? strtoul(lb + 1, NULL, 10) : 0;
}

/* True when we are clearly on a host: initial user or PID namespace, or
 * /proc unavailable so that we cannot tell. */
static int looks_like_host(void)
{
    unsigned long user = ns_inode("user"), pid = ns_inode("pid");
    return user == 0 || pid == 0 || user == PROC_USER_INIT_INO ||
           pid == PROC_PID_INIT_INO;
}

/* ------------------------------------------------------------------------ */
/* kill-class: the syscall must never run.                                   */
/* ------------------------------------------------------------------------ */

static int c_ptrace(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* TRACEME only marks us traceable by our parent: harmless on a host,
     * while attaching to pid 1 could stop the host's init. */
    long rc = syscall(SYS_ptrace, PTRACE_TRACEME, 0L, 0L, 0L);
    return returned(rc);
}

static int c_mount(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_mount, "xsb-probe", "/tmp", "tmpfs", 0UL, "size=1m");
    return returned(rc);
}

static int c_umount2(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_umount2, "/proc", MNT_DETACH);
    return returned(rc);
}

static int c_unshare(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_unshare, CLONE_NEWUSER);
    return returned(rc);
}

static int c_setns(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* Even if the open fails, still make the setns call (with -1): the
     * point is that the filter kills on the syscall itself. */
    int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    long rc = syscall(SYS_setns, fd, CLONE_NEWNET);
    int err = errno;
    if (fd >= 0)
        close(fd);
    errno = err;
    return returned(rc);
}

/* Raw clone with namespace flags; without CLONE_VM and a NULL stack the child
 * continues on a copy of our stack, like fork(). */
static int raw_clone_ns(unsigned long flags)
{
    long rc = syscall(SYS_clone, flags | SIGCHLD, 0L, NULL, NULL, 0L);
    if (rc == 0)
        _exit(0); /* child: do nothing */
    if (rc == -1)
        return blocked(errno, NULL);
    int status;
    waitpid((pid_t)rc, &status, 0);
    return escaped("created child %ld in a new namespace", rc);
}

static int c_clone_newuser(int argc, char **argv)
{
    (void)argc; (void)argv;
    return raw_clone_ns(CLONE_NEWUSER);
}

static int c_clone_newns(int argc, char **argv)
{
    (void)argc; (void)argv;
    return raw_clone_ns(CLONE_NEWNS);
}

static int c_keyctl(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0L);
    return returned(rc);
}

static int c_add_key(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* A key in the process keyring vanishes with the process. */
    long rc = syscall(SYS_add_key, "user", "xsb-probe", "x", 1UL,
                      KEY_SPEC_PROCESS_KEYRING);
    return returned(rc);
}

static int c_request_key(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_request_key, "user", "xsb-probe:none", NULL, 0L);
    return returned(rc);
}

static int c_bpf(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* BPF_PROG_LOAD (5) with an all-zero attribute: junk, fails EINVAL if
     * the call is reachable at all. */
    uint64_t attr[16] = {0};
    long rc = syscall(SYS_bpf, 5, attr, (unsigned long)sizeof attr);
    if (rc >= 0)
        close((int)rc);
    return returned(rc);
}

static int c_perf_event_open(int argc, char **argv)
{
    (void)argc; (void)argv;
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.disabled = 1;
    attr.exclude_kernel = 1; /* allowed at perf_event_paranoid <= 2 */
    attr.exclude_hv = 1;
    long rc = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0UL);
    if (rc >= 0)
        close((int)rc);
    return returned(rc);
}

static int c_userfaultfd(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* USER_MODE_ONLY is permitted to unprivileged users since 5.11. */
    long rc = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (rc >= 0)
        close((int)rc);
    return returned(rc);
}

static int c_io_uring_setup(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* struct io_uring_params is 120 bytes; zeroed = defaults. */
    uint64_t params[16] = {0};
    long rc = syscall(SYS_io_uring_setup, 1U, params);
    if (rc >= 0)
        close((int)rc);
    return returned(rc);
}

static int c_kexec_load(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* No segments would UNLOAD a loaded crash kernel, so also pass a
     * foreign architecture (KEXEC_ARCH_ARM = 40 << 16) that the kernel
     * rejects with EINVAL right after its capability check. */
    unsigned long flags = 40UL << 16;
    long rc = syscall(SYS_kexec_load, 0UL, 0UL, NULL, flags);
    return returned(rc);
}

static int c_init_module(int argc, char **argv)
{
    (void)argc; (void)argv;
    static char junk[64]; /* not an ELF image: ENOEXEC if reachable */
    long rc = syscall(SYS_init_module, junk, sizeof junk, "");
    return returned(rc);
}

static int c_finit_module(int argc, char **argv)
{
    (void)argc; (void)argv;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    long rc = syscall(SYS_finit_module, fd, "", 0);
    int err = errno;
    if (fd >= 0)
        close(fd);
    errno = err;
    return returned(rc);
}

static int c_delete_module(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_delete_module, "xsb_probe_no_such_module", O_NONBLOCK);
    return returned(rc);
}

/* A struct file_handle with room for the largest handle. */
union file_handle_buf {
    struct file_handle fh;
    unsigned char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
};

/* A made-up handle: ESTALE if the call is reachable with privileges. */
static int c_open_by_handle_at(int argc, char **argv)
{
    (void)argc; (void)argv;
    union file_handle_buf h;
    memset(&h, 0, sizeof h);
    h.fh.handle_bytes = 8;
    h.fh.handle_type = 1; /* FILEID_INO32_GEN */
    int mfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    long rc = syscall(SYS_open_by_handle_at, mfd, &h.fh, O_RDONLY);
    int err = errno;
    if (rc >= 0)
        close((int)rc);
    if (mfd >= 0)
        close(mfd);
    errno = err;
    return returned(rc);
}

static int c_name_to_handle_at(int argc, char **argv)
{
    (void)argc; (void)argv;
    union file_handle_buf h;
    memset(&h, 0, sizeof h);
    h.fh.handle_bytes = MAX_HANDLE_SZ;
    int mount_id = 0;
    long rc = syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &h.fh, &mount_id, 0);
    return returned(rc);
}

static int c_reboot(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* CAD_OFF only changes what Ctrl-Alt-Del does (and is EINVAL inside a
     * child PID namespace); it never reboots. */
    long rc = syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
                      LINUX_REBOOT_CMD_CAD_OFF, NULL);
    return returned(rc);
}

static int c_swapon(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* The file does not exist: ENOENT after the capability check. */
    long rc = syscall(SYS_swapon, "/tmp/xsb-probe-no-such-swapfile", 0);
    return returned(rc);
}

static int c_chroot(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_chroot, "/tmp");
    return returned(rc);
}

static int c_pivot_root(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* Non-existent paths: a reachable call fails ENOENT after its
     * capability check instead of pivoting anything. */
    long rc = syscall(SYS_pivot_root, "/xsb-probe-no-such-new-root",
                      "/xsb-probe-no-such-new-root/old");
    return returned(rc);
}

static int c_acct(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* acct(NULL) would switch host accounting off; use a missing file. */
    long rc = syscall(SYS_acct, "/xsb-probe-no-such-dir/acct");
    return returned(rc);
}

static int c_quotactl(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* Q_SYNC with no device syncs quota of all filesystems: harmless and
     * unprivileged, so it succeeds if the filter lets it through. */
    long rc = syscall(SYS_quotactl, QCMD(Q_SYNC, USRQUOTA), NULL, 0, NULL);
    return returned(rc);
}

/* ------------------------------------------------------------------------ */
/* blocked-class                                                             */
/* ------------------------------------------------------------------------ */

static int c_clone3(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* A zeroed struct clone_args (64 bytes, CLONE_ARGS_SIZE_VER2 is 88 but
     * 64 = VER0 is accepted): flags 0, exit_signal 0.  The policy must answer
     * ENOSYS so that libc falls back to clone(2), whose flags BPF can see. */
    uint64_t args[8] = {0};
    long rc = syscall(SYS_clone3, args, sizeof args);
    if (rc == 0)
        _exit(0); /* child of an unfiltered clone3 */
    if (rc > 0) {
        int status;
        waitpid((pid_t)rc, &status, __WALL); /* exit_signal 0: needs __WALL */
        return escaped("created child %ld (clone3 must fail with ENOSYS)", rc);
    }
    if (errno == ENOSYS)
        return blocked(ENOSYS, NULL);
    return escaped("failed with %s, not ENOSYS: libc will not fall back to clone",
                   errno_name(errno));
}

static int c_tiocsti(int argc, char **argv)
{
    (void)argc; (void)argv;
    char c = 'x';
    int rc = ioctl(0, TIOCSTI, &c);
    if (rc == -1)
        return blocked(errno, NULL);
    return escaped("injected a character into the terminal on stdin");
}

static int c_x32(int argc, char **argv)
{
    (void)argc; (void)argv;
#if defined(__x86_64__)
    /* __X32_SYSCALL_BIT | getpid.  A sandbox filter kills this with SIGSYS
     * (foreign ABI); without a filter and without CONFIG_X86_X32_ABI the
     * kernel answers ENOSYS. */
    long rc = syscall(0x40000000L | SYS_getpid);
    if (rc == -1)
        return blocked(errno, NULL);
    return escaped("x32 getpid returned %ld", rc);
#else
    return blocked_word("n/a", "no x32 ABI on this architecture");
#endif
}

#if defined(__x86_64__)
static void int80_sigsegv(int sig)
{
    (void)sig;
    /* No IA32 emulation: `int $0x80` raises #GP, delivered as SIGSEGV. */
    static const char msg[] = "int80: blocked (SIGSEGV) no ia32 emulation in this kernel\n";
    ssize_t n = write(1, msg, sizeof msg - 1);
    (void)n;
    _exit(0);
}
#endif

static int c_int80(int argc, char **argv)
{
    (void)argc; (void)argv;
#if defined(__x86_64__)
    signal(SIGSEGV, int80_sigsegv);
    long ret;
    /* i386 syscall 20 = getpid through the compat entry point.  The filter
     * sees AUDIT_ARCH_I386 and must kill.  r8-r11 were clobbered by this
     * path on old kernels. */
    __asm__ volatile("int $0x80"
                     : "=a"(ret)
                     : "a"(20L)
                     : "memory", "cc", "r8", "r9", "r10", "r11");
    signal(SIGSEGV, SIG_DFL);
    if (ret < 0 && ret > -4096)
        return blocked((int)-ret, NULL);
    return escaped("i386 getpid returned %ld (pid %ld)", ret, (long)getpid());
#else
    return blocked_word("n/a", "no i386 compat ABI probe on this architecture");
#endif
}

static int try_create(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd == -1)
        return blocked(errno, "%s", path);
    close(fd);
    unlink(path);
    return escaped("created %s", path);
}

static int c_write_usr(int argc, char **argv)
{
    (void)argc; (void)argv;
    return try_create("/usr/xsb-probe-test");
}

static int c_write_root(int argc, char **argv)
{
    (void)argc; (void)argv;
    return try_create("/xsb-probe-test");
}

static int c_dev_mem(int argc, char **argv)
{
    (void)argc; (void)argv;
    static const char *const devs[] = {
        "/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/sda",
        "/dev/vda", "/dev/nvme0n1", "/dev/tty", "/dev/console", "/dev/fuse",
    };
    char detail[1024] = "";
    size_t len = 0;
    int first_err = 0, opened = 0;
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        /* O_NOCTTY: never acquire a controlling terminal; O_NONBLOCK: do
         * not wait on a tty or a device. */
        int fd = open(devs[i], O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        const char *what;
        if (fd >= 0) {
            close(fd);
            opened++;
            what = "OPENED";
        } else {
            if (!first_err || first_err == ENOENT)
                first_err = errno; /* prefer the most interesting errno */
            what = errno_name(errno);
        }
        list_append(detail, sizeof detail, &len, " ", "%s=%s", devs[i], what);
    }
    if (opened)
        return escaped("%s", detail);
    return blocked(first_err, "%s", detail);
}

static int not_dot_entry(const char *name)
{
    return strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static int c_sys(int argc, char **argv)
{
    (void)argc; (void)argv;
    DIR *d = opendir("/sys");
    if (!d)
        return blocked(errno, NULL);
    char names[512] = "";
    int n = list_entries(d, not_dot_entry, names, sizeof names);
    if (n == 0)
        return blocked_word("empty", NULL);
    return escaped("/sys has %d entries: %s", n, names);
}

static int c_setuid0(int argc, char **argv)
{
    (void)argc; (void)argv;
    if (setuid(0) == -1)
        return blocked(errno, NULL);
    return escaped("setuid(0) succeeded, uid=%ld euid=%ld", (long)getuid(),
                   (long)geteuid());
}

static int c_raise_rlimit(int argc, char **argv)
{
    (void)argc; (void)argv;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
        return failed("getrlimit: %s", errno_name(errno));
    if (rl.rlim_max == RLIM_INFINITY)
        return escaped("RLIMIT_NOFILE hard limit is already unlimited");
    struct rlimit want = {rl.rlim_cur, rl.rlim_max + 1};
    if (setrlimit(RLIMIT_NOFILE, &want) == -1)
        return blocked(errno, "hard limit stays %llu",
                       (unsigned long long)rl.rlim_max);
    return escaped("raised RLIMIT_NOFILE hard limit from %llu to %llu",
                   (unsigned long long)rl.rlim_max,
                   (unsigned long long)want.rlim_max);
}

/* rt-priority: real-time scheduling needs RLIMIT_RTPRIO above 0 (no
 * CAP_SYS_NICE outside), and a SCHED_FIFO busy loop would starve the host's
 * CPUs: the sandbox never inherits the supervisor's limit. */
static int c_rt_priority(int argc, char **argv)
{
    (void)argc; (void)argv;
    struct rlimit rl;
    if (getrlimit(RLIMIT_RTPRIO, &rl) == -1)
        return failed("getrlimit: %s", errno_name(errno));
    struct sched_param param = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &param) == -1)
        return blocked(errno, "RLIMIT_RTPRIO %llu/%llu", (unsigned long long)rl.rlim_cur,
                       (unsigned long long)rl.rlim_max);
    struct sched_param normal = {.sched_priority = 0};
    (void)sched_setscheduler(0, SCHED_OTHER, &normal);
    return escaped("SCHED_FIFO priority 1 granted (RLIMIT_RTPRIO %llu/%llu)",
                   (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
}

static void read_comm(pid_t pid, char *out, size_t outlen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid);
    snprintf(out, outlen, "?");
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(out, (int)outlen, f))
            out[strcspn(out, "\n")] = '\0';
        fclose(f);
    }
}

static int c_kill_host(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* Inside the sandbox pid 1 is the sandbox's own init (or us).  The
     * kernel discards SIGKILL sent to a namespace init from inside its
     * namespace, so success of kill() itself proves little: what matters
     * is that pid 1 (and we) survive. */
    char comm[64];
    read_comm(1, comm, sizeof comm);
    if (kill(1, SIGKILL) == -1)
        return blocked(errno, "pid 1 '%s'", comm);
    sleep_seconds(0.2);
    if (kill(1, 0) == 0 || errno == EPERM)
        return blocked_word("ignored", "pid 1 '%s' survived SIGKILL (we are pid %ld)",
                            comm, (long)getpid());
    return escaped("pid 1 '%s' is gone", comm);
}

/* Connect to a TEST-NET-1 address (RFC 5737, never routed to a real host). */
static int c_net_connect(int argc, char **argv)
{
    (void)argc; (void)argv;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s == -1)
        return blocked(errno, "socket(AF_INET)");
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(9);
    sa.sin_addr.s_addr = htonl(0xC0000201); /* 192.0.2.1 */
    int rc = connect(s, (struct sockaddr *)&sa, sizeof sa);
    int err = errno;
    close(s);
    if (rc == -1 && err != EINPROGRESS)
        return blocked(err, "connect 192.0.2.1:9");
    return escaped("connect 192.0.2.1:9 %s: a route out exists",
                   rc == 0 ? "succeeded" : "in progress");
}

/* Abstract unix sockets are scoped by network namespace: a host listener
 * (tests create "@xsb-probe-host", or pass NAME) must be unreachable. */
static int c_abstract_unix(int argc, char **argv)
{
    const char *name = argc > 0 ? argv[0] : "xsb-probe-host";
    if (strlen(name) > sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
        return usage_error("abstract socket name too long");
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s == -1)
        return blocked(errno, "socket(AF_UNIX)");
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, name, strlen(name)); /* sun_path[0] = 0: abstract */
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    int rc = connect(s, (struct sockaddr *)&sa, salen);
    int err = errno;
    close(s);
    if (rc == -1)
        return blocked(err, "@%s", name);
    return escaped("connected to abstract socket @%s", name);
}

/* ------------------------------------------------------------------------ */
/* ok-class: observations                                                    */
/* ------------------------------------------------------------------------ */

static int c_caps(int argc, char **argv)
{
    (void)argc; (void)argv;
    static const char *const keys[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};
    char detail[256] = "";
    size_t len = 0;
    int nonzero = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char v[64];
        if (proc_status_field(keys[i], v, sizeof v) == -1)
            return failed("cannot read %s from /proc/self/status: %s", keys[i],
                          errno_name(errno));
        if (strtoull(v, NULL, 16) != 0)
            nonzero = 1;
        list_append(detail, sizeof detail, &len, " ", "%s=%s", keys[i], v);
    }
    return nonzero ? escaped("%s", detail) : ok("%s", detail);
}

static int c_nnp(int argc, char **argv)
{
    (void)argc; (void)argv;
    char v[32];
    if (proc_status_field("NoNewPrivs", v, sizeof v) == -1)
        return failed("cannot read NoNewPrivs: %s", errno_name(errno));
    return strcmp(v, "1") == 0 ? ok("NoNewPrivs=1") : escaped("NoNewPrivs=%s", v);
}

static int c_seccomp(int argc, char **argv)
{
    (void)argc; (void)argv;
    char v[32], filters[32];
    if (proc_status_field("Seccomp", v, sizeof v) == -1)
        return failed("cannot read Seccomp: %s", errno_name(errno));
    if (proc_status_field("Seccomp_filters", filters, sizeof filters) == -1)
        snprintf(filters, sizeof filters, "?");
    /* 2 = SECCOMP_MODE_FILTER */
    if (strcmp(v, "2") == 0)
        return ok("Seccomp=2 Seccomp_filters=%s", filters);
    return escaped("Seccomp=%s", v);
}

/* uid [UID [GID]]: real, effective and saved ids (default 1000 1000). */
static int c_uid(int argc, char **argv)
{
    long want_uid = 1000, want_gid = 1000;
    if (argc > 0 && parse_long(argv[0], 0, UINT32_MAX, &want_uid))
        return usage_error("bad UID '%s'", argv[0]);
    if (argc > 1 && parse_long(argv[1], 0, UINT32_MAX, &want_gid))
        return usage_error("bad GID '%s'", argv[1]);
    uid_t r, e, s;
    gid_t rg, eg, sg;
    getresuid(&r, &e, &s);
    getresgid(&rg, &eg, &sg);
    int ngroups = getgroups(0, NULL);
    const char *fmt = "uid=%ld euid=%ld suid=%ld gid=%ld egid=%ld sgid=%ld groups=%d";
    if (r == (uid_t)want_uid && e == r && s == r && rg == (gid_t)want_gid &&
        eg == rg && sg == rg)
        return ok(fmt, (long)r, (long)e, (long)s, (long)rg, (long)eg, (long)sg, ngroups);
    return escaped(fmt, (long)r, (long)e, (long)s, (long)rg, (long)eg, (long)sg, ngroups);
}

/* hostname [EXPECTED] */
static int c_hostname(int argc, char **argv)
{
    struct utsname u;
    if (uname(&u) == -1)
        return failed("uname: %s", errno_name(errno));
    if (argc > 0 && strcmp(u.nodename, argv[0]) != 0)
        return escaped("%s (expected %s)", u.nodename, argv[0]);
    return ok("%s", u.nodename);
}

static int c_pidns(int argc, char **argv)
{
    (void)argc; (void)argv;
    pid_t pid = getpid();
    return pid < 100 ? ok("pid=%ld ppid=%ld", (long)pid, (long)getppid())
                     : escaped("pid=%ld is not small: not in a fresh PID namespace",
                               (long)pid);
}

static int pid_entry(const char *name)
{
    return name[0] >= '0' && name[0] <= '9';
}

static int c_proc_pids(int argc, char **argv)
{
    (void)argc; (void)argv;
    DIR *d = opendir("/proc");
    if (!d)
        return failed("opendir /proc: %s", errno_name(errno));
    char list[512] = "";
    int n = list_entries(d, pid_entry, list, sizeof list);
    /* A fresh /proc in a fresh PID namespace shows only the sandbox. */
    return n < 32 ? ok("%d processes: %s", n, list)
                  : escaped("%d processes visible: %s", n, list);
}

static int c_net(int argc, char **argv)
{
    (void)argc; (void)argv;
    FILE *f = fopen("/proc/net/dev", "re");
    if (!f)
        return failed("open /proc/net/dev: %s", errno_name(errno));
    char line[512], names[512] = "";
    size_t len = 0;
    int lineno = 0, others = 0, have_lo = 0;
    while (fgets(line, sizeof line, f)) {
        if (++lineno <= 2)
            continue; /* two header lines */
        char *p = line + strspn(line, " ");
        char *colon = strchr(p, ':');
        if (!colon)
            continue;
        *colon = '\0';
        if (strcmp(p, "lo") == 0)
            have_lo = 1;
        else
            others++;
        list_append(names, sizeof names, &len, ",", "%s", p);
    }
    fclose(f);
    const char *lo_state = "absent";
    if (have_lo) {
        /* SIOCGIFFLAGS works on any socket; AF_UNIX avoids depending on the
         * policy allowing AF_INET sockets. */
        int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
        if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0)
            lo_state = (ifr.ifr_flags & IFF_UP) ? "UP" : "DOWN";
        else
            lo_state = errno_name(errno);
        if (s >= 0)
            close(s);
    }
    if (others)
        return escaped("interfaces=%s lo=%s", names, lo_state);
    if (strcmp(lo_state, "UP") != 0)
        return failed("interfaces=%s lo=%s", names, lo_state);
    return ok("interfaces=%s lo=%s", names, lo_state);
}

/* fds [ALLOWED_FD...]: only 0, 1, 2 (and the given fds) may be open. */
static int c_fds(int argc, char **argv)
{
    long allowed[32];
    int nallowed = 0;
    for (int i = 0; i < argc && nallowed < 32; i++)
        if (parse_long(argv[i], 0, INT_MAX, &allowed[nallowed++]))
            return usage_error("bad fd '%s'", argv[i]);
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return failed("opendir /proc/self/fd: %s", errno_name(errno));
    int self = dirfd(d);
    char open_list[256] = "", extra[2048] = "";
    size_t olen = 0, elen = 0;
    int nextra = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long fd;
        if (parse_long(e->d_name, 0, INT_MAX, &fd) || fd == self)
            continue;
        int ok_fd = fd <= 2;
        for (int i = 0; i < nallowed; i++)
            ok_fd |= allowed[i] == fd;
        if (ok_fd) {
            list_append(open_list, sizeof open_list, &olen, " ", "%ld", fd);
            continue;
        }
        char path[64], target[512];
        snprintf(path, sizeof path, "/proc/self/fd/%ld", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        nextra++;
        list_append(extra, sizeof extra, &elen, " ", "%ld->%s", fd, n > 0 ? target : "?");
    }
    closedir(d);
    if (nextra)
        return escaped("%d extra fds: %s", nextra, extra);
    return ok("open fds: %s", olen ? open_list : "(none)");
}

static int c_tmp_writable(int argc, char **argv)
{
    (void)argc; (void)argv;
    enum { SIZE = 1 << 20 };
    char path[64];
    snprintf(path, sizeof path, "/tmp/xsb-probe-%ld", (long)getpid());
    unsigned char *buf = malloc(SIZE), *back = malloc(SIZE);
    if (!buf || !back)
        return failed("malloc: out of memory");
    for (size_t i = 0; i < SIZE; i++)
        buf[i] = (unsigned char)(i * 131u + 7u);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd == -1)
        return failed("create %s: %s", path, errno_name(errno));
    int rc = 1;
    size_t done = 0;
    while (done < SIZE) {
        ssize_t n = write(fd, buf + done, SIZE - done);
        if (n <= 0) {
            rc = failed("write %s after %zu bytes: %s", path, done,
                        n < 0 ? errno_name(errno) : "short write");
            goto out;
        }
        done += (size_t)n;
    }
    done = 0;
    while (done < SIZE) {
        ssize_t n = pread(fd, back + done, SIZE - done, (off_t)done);
        if (n <= 0) {
            rc = failed("read back %s after %zu bytes: %s", path, done,
                        n < 0 ? errno_name(errno) : "short read");
            goto out;
        }
        done += (size_t)n;
    }
    rc = memcmp(buf, back, SIZE) == 0 ? ok("wrote and read back %d bytes", SIZE)
                                      : failed("data read back differs");
out:
    close(fd);
    unlink(path);
    free(buf);
    free(back);
    return rc;
}

/* Is `path` equal to `prefix` or below it? */
static int path_under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/')
        n--;
    return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* mounts [FORBIDDEN_PREFIX...]: no mount point under /work or /root (or the
 * given prefixes).  Only the mount point field is checked: field 4 ("root")
 * names the source directory of a bind mount, which may legitimately be
 * anywhere on the host (e.g. the build directory the probe is bound from). */
static int c_mounts(int argc, char **argv)
{
    static const char *const defaults[] = {"/work", "/root"};
    const char *const *forbidden = argc > 0 ? (const char *const *)argv : defaults;
    int nforbidden = argc > 0 ? argc : 2;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return failed("open /proc/self/mountinfo: %s", errno_name(errno));
    char line[4096], bad[1024] = "";
    size_t blen = 0;
    int lines = 0, nbad = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        /* id parent major:minor root mountpoint options ... */
        char *save = NULL, *field = strtok_r(line, " ", &save);
        for (int i = 0; field && i < 4; i++)
            field = strtok_r(NULL, " ", &save);
        if (!field)
            continue;
        for (int i = 0; i < nforbidden; i++) {
            if (path_under(field, forbidden[i])) {
                nbad++;
                list_append(bad, sizeof bad, &blen, " ", "%s", field);
                break;
            }
        }
    }
    fclose(f);
    if (nbad)
        return escaped("%d mounts, %d forbidden: %s", lines, nbad, bad);
    return ok("%d mounts", lines);
}

/* nosuid: /usr and /tmp are mounted nosuid and nodev. */
static int c_nosuid(int argc, char **argv)
{
    (void)argc; (void)argv;
    static const char *const paths[] = {"/usr", "/tmp"};
    char detail[256] = "";
    size_t len = 0;
    int bad = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        struct statvfs sv;
        if (statvfs(paths[i], &sv) == -1) {
            list_append(detail, sizeof detail, &len, " ", "%s=%s", paths[i], errno_name(errno));
            continue; /* absent is fine */
        }
        int nosuid = (sv.f_flag & ST_NOSUID) != 0, nodev = (sv.f_flag & ST_NODEV) != 0;
        bad |= !nosuid || !nodev;
        list_append(detail, sizeof detail, &len, " ", "%s=%s,%s%s", paths[i],
                    nosuid ? "nosuid" : "SUID", nodev ? "nodev" : "DEV",
                    (sv.f_flag & ST_RDONLY) ? ",ro" : ",rw");
    }
    return bad ? escaped("%s", detail) : ok("%s", detail);
}

/* dev-basic: the minimal /dev works. */
static int c_dev_basic(int argc, char **argv)
{
    (void)argc; (void)argv;
    unsigned char b[16];
    int fd;
    if ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) == -1 || write(fd, "x", 1) != 1 ||
        read(fd, b, 1) != 0)
        return failed("/dev/null: %s", errno_name(errno));
    close(fd);
    if ((fd = open("/dev/zero", O_RDONLY | O_CLOEXEC)) == -1 || read(fd, b, sizeof b) != (ssize_t)sizeof b ||
        b[0] != 0)
        return failed("/dev/zero: %s", errno_name(errno));
    close(fd);
    if ((fd = open("/dev/full", O_WRONLY | O_CLOEXEC)) == -1)
        return failed("/dev/full: %s", errno_name(errno));
    if (write(fd, "x", 1) != -1 || errno != ENOSPC)
        return failed("/dev/full: write did not fail with ENOSPC");
    close(fd);
    static const char *const rnd[] = {"/dev/random", "/dev/urandom"};
    for (int i = 0; i < 2; i++) {
        if ((fd = open(rnd[i], O_RDONLY | O_CLOEXEC)) == -1 ||
            read(fd, b, sizeof b) != (ssize_t)sizeof b)
            return failed("%s: %s", rnd[i], errno_name(errno));
        close(fd);
    }
    struct stat st;
    if (stat("/dev/shm", &st) == -1 || !S_ISDIR(st.st_mode))
        return failed("/dev/shm: %s", errno_name(errno));
    return ok("null zero full random urandom shm");
}

/* session: we lead our own session, or its leader is inside our PID
 * namespace (a sandbox init that called setsid() before starting us). */
static int c_session(int argc, char **argv)
{
    (void)argc; (void)argv;
    pid_t sid = getsid(0), pid = getpid();
    if (sid == pid)
        return ok("sid=%ld pid=%ld", (long)sid, (long)pid);
    unsigned long pidns = ns_inode("pid");
    if (sid > 0 && pidns != 0 && pidns != PROC_PID_INIT_INO)
        return ok("sid=%ld pid=%ld (leader inside our PID namespace)", (long)sid, (long)pid);
    if (sid == 0)
        return escaped("sid=0: session leader outside our PID namespace (pid=%ld)",
                       (long)pid);
    return escaped("sid=%ld pid=%ld: not a new session", (long)sid, (long)pid);
}

static int c_env(int argc, char **argv)
{
    (void)argc; (void)argv;
    int n = 0;
    for (char **e = environ; *e; e++)
        n++;
    ok("%d variables", n);
    for (char **e = environ; *e; e++)
        printf("%s\n", *e);
    fflush(stdout);
    return 0;
}

/* init-proc: /proc/1 (the sandbox init, a clone of the supervisor) must not show the
 * supervisor's command line or environment: cmdline is "xsb-init" (padded with NULs)
 * and environ is unreadable or only NULs. */
static int c_init_proc(int argc, char **argv)
{
    (void)argc; (void)argv;
    char buf[8192];
    int fd = open("/proc/1/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return failed("cannot open /proc/1/cmdline: %s", errno_name(errno));
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n < 0)
        return failed("cannot read /proc/1/cmdline: %s", errno_name(errno));
    static const char expected[] = "xsb-init";
    for (ssize_t i = 0; i < n; i++) {
        char want = i < (ssize_t)sizeof expected - 1 ? expected[i] : '\0';
        if (buf[i] != want) {
            for (ssize_t j = 0; j < n; j++)
                if (buf[j] == '\0')
                    buf[j] = ' ';
            buf[n < 200 ? n : 200] = '\0';
            return escaped("/proc/1/cmdline shows \"%s\"", buf);
        }
    }
    fd = open("/proc/1/environ", O_RDONLY | O_CLOEXEC);
    ssize_t m = fd < 0 ? -1 : read(fd, buf, sizeof buf);
    int err = errno;
    if (fd >= 0)
        close(fd);
    for (ssize_t i = 0; i < m; i++) {
        if (buf[i] != '\0') {
            buf[m < 200 ? m : 200] = '\0';
            return escaped("/proc/1/environ shows \"%s\"", buf);
        }
    }
    return ok("/proc/1/cmdline is %zd bytes of \"xsb-init\", /proc/1/environ %s", n,
              m < 0 ? errno_name(err) : "holds only NULs");
}

/* ------------------------------------------------------------------------ */
/* kill robustness: ways to survive a kill-listed call                       */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t g_alarms;

static void count_alarm(int sig)
{
    (void)sig;
    g_alarms++;
}

/* kill-under-signals [ATTEMPTS]: SIGALRM every 20 us, handled without SA_RESTART, so a
 * kill-listed ptrace() waiting for its seccomp notification to be read is interrupted: the
 * notification is withdrawn and the call returns EINTR.  Makes ATTEMPTS (default 1) such
 * calls, then lives on for 0.3 s: still being alive then is an escape. */
static int t_kill_under_signals(int argc, char **argv)
{
    long attempts = 1;
    if (argc > 0 && parse_long(argv[0], 1, 1000000, &attempts))
        return usage_error("bad ATTEMPTS '%s'", argv[0]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_alarm;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0)
        return failed("sigaction: %s", errno_name(errno));
    struct itimerval flood = {.it_interval = {0, 20}, .it_value = {0, 20}};
    if (setitimer(ITIMER_REAL, &flood, NULL) != 0)
        return failed("setitimer: %s", errno_name(errno));
    while (g_alarms == 0) {
    }
    long interrupted = 0, other = 0;
    for (long i = 0; i < attempts; i++) {
        long rc = syscall(SYS_ptrace, PTRACE_TRACEME, 0L, 0L, 0L);
        if (rc == -1 && errno == EINTR)
            interrupted++;
        else
            other++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    /* Stay a while: the kill may come after the call returned (it was withdrawn), but it
     * must come. */
    sleep_seconds(0.3);
    return escaped("ptrace returned %ld times (%ld EINTR, %ld otherwise) and the sandbox lives",
                   attempts, interrupted, other);
}

/* stacked-errno: installs a filter of our own that fails ptrace with EPERM (an ERRNO action
 * outranks the sandbox's user notification), then calls ptrace.  Inside a sandbox either
 * the install is refused (blocked) or the call kills the sandbox; returning is an escape. */
static int t_stacked_errno(int argc, char **argv)
{
    (void)argc; (void)argv;
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ptrace, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return failed("no_new_privs: %s", errno_name(errno));
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
        return blocked(errno, "installing a filter of our own");
    long rc = syscall(SYS_ptrace, PTRACE_TRACEME, 0L, 0L, 0L);
    int err = errno;
    return escaped("our filter is in place and ptrace returned %ld (%s)", rc,
                   rc == -1 ? errno_name(err) : "ran");
}

/* ------------------------------------------------------------------------ */
/* tools                                                                     */
/* ------------------------------------------------------------------------ */

static int need_seconds(int argc, char **argv, double *out)
{
    long v;
    if (argc < 1 || parse_long(argv[0], 0, 86400, &v))
        return usage_error("needs SECONDS (integer 0..86400)");
    *out = (double)v;
    return 0;
}

static int t_sleep(int argc, char **argv)
{
    double s = 0;
    if (need_seconds(argc, argv, &s))
        return 2;
    ok("pid=%ld sleeping %.0f s", (long)getpid(), s); /* printed first: "running" */
    sleep_seconds(s);
    return 0;
}

/* Parent and child each print a tick per second, so a suspend test can see
 * that no process of the sandbox makes progress while it is stopped. */
static int t_fork_sleep(int argc, char **argv)
{
    double s = 0;
    if (need_seconds(argc, argv, &s))
        return 2;
    fflush(stdout);
    pid_t child = fork();
    if (child == -1)
        return failed("fork: %s", errno_name(errno));
    int is_child = child == 0;
    if (!is_child)
        ok("parent=%ld child=%ld", (long)getpid(), (long)child);
    double end = now_monotonic() + s;
    for (int tick = 1; now_monotonic() < end; tick++) {
        double left = end - now_monotonic();
        sleep_seconds(left < 1.0 ? left : 1.0);
        printf("fork-sleep: tick %s %d\n", is_child ? "child" : "parent", tick);
        fflush(stdout);
    }
    if (is_child)
        _exit(0);
    int status;
    waitpid(child, &status, 0);
    return 0;
}

/* A vfork parent waits in the kernel (state D) until its child execs or exits. Its child
 * stops itself, so the parent waits until the sandbox is resumed: a suspend must still
 * succeed. The child uses raw system calls only (it runs on the parent's stack). */
static int t_vfork_stopped_child(int argc, char **argv)
{
    (void)argc; (void)argv;
    fflush(stdout);
    pid_t child = vfork();
    if (child == 0) {
        static const char message[] = "vfork-stopped-child: child stopping\n";
        (void)!write(1, message, sizeof message - 1);
        kill(getpid(), SIGSTOP);
        _exit(0);
    }
    if (child == -1)
        return failed("vfork: %s", errno_name(errno));
    int status;
    if (waitpid(child, &status, 0) != child)
        return failed("waitpid: %s", errno_name(errno));
    return ok("child %ld ended with %d", (long)child, status);
}

static int t_crash(int argc, char **argv)
{
    (void)argc; (void)argv;
    fflush(stdout);
    volatile int *volatile p = NULL;
    *p = 42; /* SIGSEGV */
    return failed("writing through NULL did not crash");
}

static int t_exit(int argc, char **argv)
{
    long n;
    if (argc < 1 || parse_long(argv[0], 0, 255, &n))
        return usage_error("needs N (0..255)");
    fflush(stdout);
    exit((int)n);
}

/* memory-bomb [MAX_MIB]: allocate and touch 64 MiB chunks until malloc fails
 * (RLIMIT_AS) or the kernel kills us (cgroup memory.max / OOM). */
static int t_memory_bomb(int argc, char **argv)
{
    long max_mib = 0;
    if (argc > 0 && parse_long(argv[0], 1, LONG_MAX, &max_mib))
        return usage_error("bad MAX_MIB '%s'", argv[0]);
    /* "after-stdin": start once a byte (or the end) comes on stdin, so that a test can
     * watch the sandbox from the bomb's first moment. */
    if (argc > 1) {
        if (strcmp(argv[1], "after-stdin") != 0) return usage_error("bad '%s'", argv[1]);
        char go;
        (void)read(0, &go, 1);
    }
    enum { CHUNK = 64 << 20 };
    void *head = NULL; /* chunks are chained so the stores are never dead */
    long mib = 0;
    for (;;) {
        if (max_mib && mib + 64 > max_mib)
            return ok("stopped at the requested %ld MiB without ENOMEM", mib);
        void *p = malloc(CHUNK);
        if (!p) {
            int err = errno;
            (void)head;
            return ok("malloc failed (%s) after %ld MiB", errno_name(err), mib);
        }
        memset(p, 0xA5, CHUNK); /* touch every page */
        *(void **)p = head;
        head = p;
        mib += 64;
        fprintf(stderr, "memory-bomb: %ld MiB\n", mib);
    }
}

/* An optional HOLD_S argument (0..3600): how long a bomb stays at its peak
 * after reporting it, so that a test can check the host and other sandboxes
 * meanwhile. */
static int hold_argument(int argc, char **argv, int index, double *out)
{
    long v = 0;
    if (argc > index && parse_long(argv[index], 0, 3600, &v))
        return usage_error("bad HOLD_S '%s'", argv[index]);
    *out = (double)v;
    return 0;
}

/* fork-bomb [MAX [HOLD_S]]: fork until fork fails (pids.max / RLIMIT_NPROC);
 * MAX 0 means no maximum. The children live max(5, HOLD_S) seconds; the
 * parent reports, then holds HOLD_S seconds. */
static int t_fork_bomb(int argc, char **argv)
{
    long max = 0;
    double hold = 0;
    if (argc > 0 && parse_long(argv[0], 0, LONG_MAX, &max))
        return usage_error("bad MAX '%s'", argv[0]);
    if (hold_argument(argc, argv, 1, &hold))
        return 2;
    fflush(stdout);
    long count = 0;
    int rc;
    for (;;) {
        if (max && count >= max) {
            rc = ok("stopped at the requested %ld children", count);
            break;
        }
        pid_t pid = fork();
        if (pid == 0) {
            sleep_seconds(hold > 5 ? hold : 5);
            _exit(0);
        }
        if (pid == -1) {
            rc = ok("fork failed (%s) after %ld children", errno_name(errno), count);
            break;
        }
        count++;
    }
    sleep_seconds(hold);
    return rc;
}

/* tmp-fill [HOLD_S]: write 1 MiB blocks to a file in /tmp until the file
 * system is full (ENOSPC; EFBIG or EDQUOT for a file-size limit or quota),
 * report how much went in, then hold HOLD_S seconds with /tmp full. */
static int t_tmp_fill(int argc, char **argv)
{
    double hold = 0;
    if (hold_argument(argc, argv, 0, &hold))
        return 2;
    /* A file-size limit would stop the file before /tmp is full: SIGXFSZ must
     * not kill us, the write fails with EFBIG instead. */
    signal(SIGXFSZ, SIG_IGN);
    char path[96];
    snprintf(path, sizeof path, "/tmp/xsb-probe-tmp-fill-%ld", (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return failed("open %s: %s", path, errno_name(errno));
    static char block[1 << 20];
    memset(block, 0x5A, sizeof block);
    long long total = 0;
    int err = 0;
    for (;;) {
        ssize_t n = write(fd, block, sizeof block);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (n == 0) {
            err = ENOSPC;
            break;
        }
        total += n;
    }
    int rc = ok("/tmp full (%s) after %lld MiB", errno_name(err), total >> 20);
    sleep_seconds(hold);
    close(fd);
    unlink(path);
    return rc;
}

/* fd-exhaust [HOLD_S]: open /dev/null until no descriptor is left (EMFILE
 * for RLIMIT_NOFILE, ENFILE for the machine), report, then hold HOLD_S
 * seconds with every descriptor taken. */
static int t_fd_exhaust(int argc, char **argv)
{
    double hold = 0;
    if (hold_argument(argc, argv, 0, &hold))
        return 2;
    long count = 0;
    int err;
    for (;;) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) {
            err = errno;
            break;
        }
        count++;
    }
    /* stdout is open, so the report still goes out. */
    int rc = ok("open failed (%s) after %ld descriptors", errno_name(err), count);
    sleep_seconds(hold);
    return rc;
}

static int t_cpu_spin(int argc, char **argv)
{
    double s = 0;
    if (need_seconds(argc, argv, &s))
        return 2;
    double end = now_monotonic() + s;
    volatile unsigned long spins = 0;
    while (now_monotonic() < end)
        for (int i = 0; i < 100000; i++)
            spins++;
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    return ok("spun %.0f s, cpu time %.2f s", s,
              (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9);
}


/* unknown-syscalls N: N calls of N different numbers no syscall has (each
 * returns ENOSYS when the filter lets it run): under --audit the sandbox
 * reports a bounded number of them, however many it makes. */
static int t_unknown_syscalls(int argc, char **argv)
{
    long n;
    if (argc < 1 || parse_long(argv[0], 1, 1000000, &n))
        return usage_error("needs N (1..1000000)");
    long enosys = 0;
    for (long i = 0; i < n; i++)
        if (syscall(100000 + i) == -1 && errno == ENOSYS)
            enosys++;
    return ok("made %ld calls of unknown numbers, %ld returned ENOSYS", n, enosys);
}

/* ------------------------------------------------------------------------ */
/* Built-in refusals and the shipped levels' argument rules: each call must   */
/* fail with one particular errno (the filter's answer), not just fail.       */
/* ------------------------------------------------------------------------ */

/* The call returned `rc`: blocked when it failed with `want`, ESCAPED when it
 * succeeded, FAILED when something else stopped it (the test proves nothing). */
static int expect_errno(long rc, int want, const char *what)
{
    if (rc != -1)
        return escaped("%s succeeded (returned %ld)", what, rc);
    if (errno == want)
        return blocked(want, "%s", what);
    return failed("%s failed with %s, expected %s", what, errno_name(errno),
                  errno_name(want));
}

/* A fresh path in /tmp for this check (removed afterwards by the caller). */
static void tmp_path(char *out, size_t outlen)
{
    snprintf(out, outlen, "/tmp/xsb-probe-%s-%ld", g_check, (long)getpid());
}

/* Creates this check's file in /tmp with mode 0755 (its path in `path`): the
 * open fd, or -1 after reporting FAILED. */
static int open_tmp_file(char *path, size_t pathlen)
{
    tmp_path(path, pathlen);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    if (fd == -1)
        failed("create %s: %s", path, errno_name(errno));
    return fd;
}

/* The same, closed: 0, or -1 after reporting FAILED. */
static int make_tmp_file(char *path, size_t pathlen)
{
    int fd = open_tmp_file(path, pathlen);
    if (fd == -1)
        return -1;
    close(fd);
    return 0;
}

/* The verdict on a call that tried to create `path` with a set-id mode and
 * returned `rc` (its fd or -1): ESCAPED, naming the mode the file got, when it
 * was created (`created` says how), else expect_errno(EPERM). */
static int setid_create_verdict(long rc, const char *path, const char *created, const char *what)
{
    if (rc >= 0) {
        struct stat st;
        int mode = fstat((int)rc, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
        close((int)rc);
        unlink(path);
        return escaped("%s %04o", created, mode);
    }
    return expect_errno(rc, EPERM, what);
}

/* setid-chmod: chmod 06755 on our own file in a writable /tmp. */
static int c_setid_chmod(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    if (make_tmp_file(path, sizeof path) == -1)
        return 1;
    long rc = chmod(path, 06755);
    int err = errno;
    struct stat st;
    int mode = stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
    unlink(path);
    errno = err;
    if (rc == 0)
        return escaped("chmod 06755 worked: mode %04o", mode);
    return expect_errno(rc, EPERM, "chmod 06755");
}

/* setid-fchmod: fchmod 04755 on an open file; setid-fchmodat2: the newest chmod. */
static int c_setid_fchmod(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    int fd = open_tmp_file(path, sizeof path);
    if (fd == -1)
        return 1;
    long rc = fchmod(fd, 04755);
    int err = errno;
    close(fd);
    unlink(path);
    errno = err;
    return expect_errno(rc, EPERM, "fchmod 04755");
}

static int c_setid_fchmodat2(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    if (make_tmp_file(path, sizeof path) == -1)
        return 1;
    long rc = syscall(SYS_fchmodat2, AT_FDCWD, path, 02755, 0);
    int err = errno;
    unlink(path);
    errno = err;
    return expect_errno(rc, EPERM, "fchmodat2 02755");
}

/* setid-open: creating a file with mode 04755.  The umask would not strip
 * S_ISUID, but the call itself must fail. */
static int c_setid_open(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    tmp_path(path, sizeof path);
    long rc = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 04755);
    return setid_create_verdict(rc, path, "open(O_CREAT, 04755) created a file with mode",
                                "open(O_CREAT, 04755)");
}

/* setid-open-high: the mode with garbage in the upper 32 bits (the kernel
 * reads a umode_t), through the raw system call. */
static int c_setid_open_high(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    tmp_path(path, sizeof path);
    long rc = syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                      0xdeadbeef00000000UL | 04755UL);
    return setid_create_verdict(rc, path, "openat with mode 0xdeadbeef00000000|04755 created mode",
                                "openat(O_CREAT, 0xdeadbeef00000000|04755)");
}

static int c_setid_mkdir(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    tmp_path(path, sizeof path);
    long rc = mkdir(path, 02755);
    int err = errno;
    if (rc == 0) {
        rmdir(path);
        return escaped("mkdir 02755 succeeded");
    }
    errno = err;
    return expect_errno(rc, EPERM, "mkdir 02755");
}

static int c_setid_mknod(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    tmp_path(path, sizeof path);
    long rc = mknod(path, S_IFREG | 04755, 0);
    int err = errno;
    if (rc == 0) {
        unlink(path);
        return escaped("mknod S_IFREG|04755 succeeded");
    }
    errno = err;
    return expect_errno(rc, EPERM, "mknod S_IFREG|04755");
}

#ifndef RENAME_WHITEOUT
#define RENAME_WHITEOUT (1 << 2)
#endif

/* whiteout-rename [DIR], whiteout-mknod [DIR]: a 0:0 character device, which
 * overlayfs, tar and rsync take for a whiteout, made in DIR (default /tmp) by
 * renameat2(RENAME_WHITEOUT) or by mknod.  Both must fail with EPERM.  What was
 * made in a DIR given is left there, for the caller to look for on the host. */
static int whiteout_verdict(long rc, const char *node, int keep, const char *what)
{
    int err = errno;
    struct stat st;
    if (lstat(node, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
        if (!keep)
            unlink(node);
        return escaped("%s made the device %u:%u", what, major(st.st_rdev), minor(st.st_rdev));
    }
    errno = err;
    return expect_errno(rc, EPERM, what);
}

static int c_whiteout_rename(int argc, char **argv)
{
    char from[PATH_MAX], to[PATH_MAX];
    const char *dir = argc > 0 ? argv[0] : "/tmp";
    snprintf(from, sizeof from, "%s/xsb-probe-%s-%ld", dir, g_check, (long)getpid());
    snprintf(to, sizeof to, "%s/xsb-probe-%s-%ld.renamed", dir, g_check, (long)getpid());
    int fd = open(from, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd == -1)
        return failed("create %s: %s", from, errno_name(errno));
    close(fd);
    long rc = syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_WHITEOUT);
    int verdict = whiteout_verdict(rc, from, argc > 0, "renameat2(RENAME_WHITEOUT)");
    unlink(rc == 0 ? to : from);
    return verdict;
}

static int c_whiteout_mknod(int argc, char **argv)
{
    char path[PATH_MAX];
    const char *dir = argc > 0 ? argv[0] : "/tmp";
    snprintf(path, sizeof path, "%s/xsb-probe-%s-%ld", dir, g_check, (long)getpid());
    long rc = mknod(path, S_IFCHR | 0644, makedev(0, 0));
    return whiteout_verdict(rc, path, argc > 0, "mknod S_IFCHR 0:0");
}

/* openat2 passes its mode in memory: it must fail with ENOSYS (libc then
 * falls back to openat, whose mode the filter can read). */
static int c_openat2(int argc, char **argv)
{
    (void)argc; (void)argv;
    char path[96];
    tmp_path(path, sizeof path);
    struct { uint64_t flags, mode, resolve; } how = {O_WRONLY | O_CREAT | O_EXCL, 04755, 0};
    long rc = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    int err = errno;
    if (rc >= 0) {
        close((int)rc);
        unlink(path);
        return escaped("openat2 created a file with mode 04755 requested");
    }
    errno = err;
    return expect_errno(rc, ENOSYS, "openat2");
}

static int c_socket_vsock(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return expect_errno(rc, EAFNOSUPPORT, "socket(AF_VSOCK)");
}

static int c_socket_netlink_uevent(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
    return expect_errno(rc, EAFNOSUPPORT, "socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)");
}

/* socket-families: the families ordinary programs need still work. */
static int c_socket_families(int argc, char **argv)
{
    (void)argc; (void)argv;
    static const struct { int family, type, protocol; const char *name; } wanted[] = {
        {AF_UNIX, SOCK_STREAM, 0, "unix"},
        {AF_INET, SOCK_DGRAM, 0, "inet"},
        {AF_INET6, SOCK_STREAM, 0, "inet6"},
        {AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, "netlink-route"},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        int fd = socket(wanted[i].family, wanted[i].type | SOCK_CLOEXEC, wanted[i].protocol);
        if (fd == -1)
            return failed("socket(%s): %s", wanted[i].name, errno_name(errno));
        close(fd);
    }
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == -1)
        return failed("socketpair(AF_UNIX): %s", errno_name(errno));
    close(pair[0]);
    close(pair[1]);
    return ok("unix inet inet6 netlink-route, socketpair unix");
}

static int c_personality(int argc, char **argv)
{
    (void)argc; (void)argv;
    long rc = syscall(SYS_personality, (unsigned long)(PER_LINUX | READ_IMPLIES_EXEC));
    return expect_errno(rc, EPERM, "personality(READ_IMPLIES_EXEC)");
}

/* prlimit-init: the sandbox init's limits must not change from inside. */
static int c_prlimit_init(int argc, char **argv)
{
    (void)argc; (void)argv;
    struct rlimit zero = {0, 0};
    long rc = syscall(SYS_prlimit64, 1, RLIMIT_CORE, &zero, NULL);
    return expect_errno(rc, EPERM, "prlimit64(1, RLIMIT_CORE)");
}

/* nested-filter: stacking a filter of our own (here one that allows all). */
static int c_nested_filter(int argc, char **argv)
{
    (void)argc; (void)argv;
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {1, &allow};
    long rc = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
    return expect_errno(rc, EPERM, "prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)");
}

static int c_nested_filter_seccomp(int argc, char **argv)
{
    (void)argc; (void)argv;
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {1, &allow};
    long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
    return expect_errno(rc, EPERM, "seccomp(SECCOMP_SET_MODE_FILTER)");
}

/* A read-only file to map: our own executable. */
static int open_self(void)
{
    return open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
}

/* Runs the `ret` instruction written at `page`; returns only if it ran. */
static void run_written_code(void *page)
{
#if defined(__x86_64__) || defined(__i386__)
    ((unsigned char *)page)[0] = 0xc3; /* ret */
    ((void (*)(void))page)();
#else
    (void)page;
#endif
}

/* wx-mmap: a private mapping of a read-only file, writable and executable at once. */
static int t_wx_mmap(int argc, char **argv)
{
    (void)argc; (void)argv;
    int fd = open_self();
    if (fd == -1)
        return failed("open /proc/self/exe: %s", errno_name(errno));
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (page == MAP_FAILED)
        return blocked(err, "mmap(file, PROT_WRITE|PROT_EXEC, MAP_PRIVATE)");
    run_written_code(page);
    return escaped("mapped a read-only file writable and executable and ran code written into it");
}

/* wx-mprotect: the same mapping writable first, then executable. */
static int t_wx_mprotect(int argc, char **argv)
{
    (void)argc; (void)argv;
    int fd = open_self();
    if (fd == -1)
        return failed("open /proc/self/exe: %s", errno_name(errno));
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (page == MAP_FAILED)
        return failed("mmap(file, PROT_READ|PROT_WRITE, MAP_PRIVATE): %s", errno_name(err));
    ((unsigned char *)page)[0] = 0xc3;
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) == -1)
        return blocked(errno, "mprotect(PROT_READ|PROT_EXEC) after writing");
    run_written_code(page);
    return escaped("made a written page executable and ran it");
}

/* mdwe: the memory-deny-write-execute flags of this process (after execve). */
static int t_mdwe(int argc, char **argv)
{
    (void)argc; (void)argv;
    long flags = prctl(PR_GET_MDWE, 0, 0, 0, 0);
    if (flags == -1)
        return failed("prctl(PR_GET_MDWE): %s", errno_name(errno));
    return ok("PR_GET_MDWE=%ld", flags);
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

enum expect { KILL, BLOCKED, OK, SIGSYS_ABI, TOOL };
enum { DANGEROUS = 1 }; /* refuses to run outside a sandbox */

struct check {
    const char *name;
    enum expect expect;
    const char *syscall; /* for KILL: the syscall the supervisor should name */
    unsigned flags;
    int (*run)(int argc, char **argv);
    const char *args; /* usage of optional/required arguments */
};

static const struct check checks[] = {
    /* kill-class */
    {"ptrace", KILL, "ptrace", 0, c_ptrace, ""},
    {"mount", KILL, "mount", DANGEROUS, c_mount, ""},
    {"umount2", KILL, "umount2", DANGEROUS, c_umount2, ""},
    {"unshare", KILL, "unshare", 0, c_unshare, ""},
    {"setns", KILL, "setns", 0, c_setns, ""},
    {"clone-newuser", KILL, "clone", 0, c_clone_newuser, ""},
    {"clone-newns", KILL, "clone", 0, c_clone_newns, ""},
    {"keyctl", KILL, "keyctl", 0, c_keyctl, ""},
    {"add_key", KILL, "add_key", 0, c_add_key, ""},
    {"request_key", KILL, "request_key", 0, c_request_key, ""},
    {"bpf", KILL, "bpf", 0, c_bpf, ""},
    {"perf_event_open", KILL, "perf_event_open", 0, c_perf_event_open, ""},
    {"userfaultfd", KILL, "userfaultfd", 0, c_userfaultfd, ""},
    {"io_uring_setup", KILL, "io_uring_setup", 0, c_io_uring_setup, ""},
    {"kexec_load", KILL, "kexec_load", DANGEROUS, c_kexec_load, ""},
    {"init_module", KILL, "init_module", 0, c_init_module, ""},
    {"finit_module", KILL, "finit_module", 0, c_finit_module, ""},
    {"delete_module", KILL, "delete_module", 0, c_delete_module, ""},
    {"open_by_handle_at", KILL, "open_by_handle_at", 0, c_open_by_handle_at, ""},
    {"name_to_handle_at", KILL, "name_to_handle_at", 0, c_name_to_handle_at, ""},
    {"reboot", KILL, "reboot", DANGEROUS, c_reboot, ""},
    {"swapon", KILL, "swapon", DANGEROUS, c_swapon, ""},
    {"chroot", KILL, "chroot", 0, c_chroot, ""},
    {"pivot_root", KILL, "pivot_root", DANGEROUS, c_pivot_root, ""},
    {"acct", KILL, "acct", DANGEROUS, c_acct, ""},
    {"quotactl", KILL, "quotactl", 0, c_quotactl, ""},
    /* blocked-class */
    {"clone3", BLOCKED, NULL, 0, c_clone3, ""},
    {"tiocsti", BLOCKED, NULL, 0, c_tiocsti, ""},
    {"x32", SIGSYS_ABI, NULL, 0, c_x32, ""},
    {"int80", SIGSYS_ABI, NULL, 0, c_int80, ""},
    {"write-usr", BLOCKED, NULL, 0, c_write_usr, ""},
    {"write-root", BLOCKED, NULL, 0, c_write_root, ""},
    {"dev-mem", BLOCKED, NULL, 0, c_dev_mem, ""},
    {"sys", BLOCKED, NULL, 0, c_sys, ""},
    {"setuid0", BLOCKED, NULL, 0, c_setuid0, ""},
    {"raise-rlimit", BLOCKED, NULL, 0, c_raise_rlimit, ""},
    {"rt-priority", BLOCKED, NULL, 0, c_rt_priority, ""},
    {"kill-host", BLOCKED, NULL, DANGEROUS, c_kill_host, ""},
    {"net-connect", BLOCKED, NULL, 0, c_net_connect, ""},
    {"abstract-unix", BLOCKED, NULL, 0, c_abstract_unix, "[NAME]"},
    {"setid-chmod", BLOCKED, NULL, 0, c_setid_chmod, ""},
    {"setid-fchmod", BLOCKED, NULL, 0, c_setid_fchmod, ""},
    {"setid-fchmodat2", BLOCKED, NULL, 0, c_setid_fchmodat2, ""},
    {"setid-open", BLOCKED, NULL, 0, c_setid_open, ""},
    {"setid-open-high", BLOCKED, NULL, 0, c_setid_open_high, ""},
    {"setid-mkdir", BLOCKED, NULL, 0, c_setid_mkdir, ""},
    {"setid-mknod", BLOCKED, NULL, 0, c_setid_mknod, ""},
    {"whiteout-rename", BLOCKED, NULL, 0, c_whiteout_rename, "[DIR]"},
    {"whiteout-mknod", BLOCKED, NULL, 0, c_whiteout_mknod, "[DIR]"},
    {"openat2", BLOCKED, NULL, 0, c_openat2, ""},
    {"socket-vsock", BLOCKED, NULL, 0, c_socket_vsock, ""},
    {"socket-netlink-uevent", BLOCKED, NULL, 0, c_socket_netlink_uevent, ""},
    {"personality", BLOCKED, NULL, 0, c_personality, ""},
    {"prlimit-init", BLOCKED, NULL, 0, c_prlimit_init, ""},
    {"nested-filter", BLOCKED, NULL, 0, c_nested_filter, ""},
    {"nested-filter-seccomp", BLOCKED, NULL, 0, c_nested_filter_seccomp, ""},
    /* ok-class */
    {"caps", OK, NULL, 0, c_caps, ""},
    {"nnp", OK, NULL, 0, c_nnp, ""},
    {"seccomp", OK, NULL, 0, c_seccomp, ""},
    {"uid", OK, NULL, 0, c_uid, "[UID [GID]]"},
    {"hostname", OK, NULL, 0, c_hostname, "[EXPECTED]"},
    {"pidns", OK, NULL, 0, c_pidns, ""},
    {"proc-pids", OK, NULL, 0, c_proc_pids, ""},
    {"net", OK, NULL, 0, c_net, ""},
    {"fds", OK, NULL, 0, c_fds, "[ALLOWED_FD...]"},
    {"tmp-writable", OK, NULL, 0, c_tmp_writable, ""},
    {"mounts", OK, NULL, 0, c_mounts, "[FORBIDDEN_PREFIX...]"},
    {"nosuid", OK, NULL, 0, c_nosuid, ""},
    {"dev-basic", OK, NULL, 0, c_dev_basic, ""},
    {"session", OK, NULL, 0, c_session, ""},
    {"env", OK, NULL, 0, c_env, ""},
    {"init-proc", OK, NULL, 0, c_init_proc, ""},
    {"socket-families", OK, NULL, 0, c_socket_families, ""},
    /* tools: not assertions, not in `list` */
    {"sleep", TOOL, NULL, 0, t_sleep, "SECONDS"},
    {"fork-sleep", TOOL, NULL, 0, t_fork_sleep, "SECONDS"},
    {"vfork-stopped-child", TOOL, NULL, 0, t_vfork_stopped_child, ""},
    {"crash", TOOL, NULL, 0, t_crash, ""},
    {"exit", TOOL, NULL, 0, t_exit, "N"},
    {"memory-bomb", TOOL, NULL, DANGEROUS, t_memory_bomb, "[MAX_MIB [after-stdin]]"},
    {"fork-bomb", TOOL, NULL, DANGEROUS, t_fork_bomb, "[MAX [HOLD_S]]"},
    {"tmp-fill", TOOL, NULL, DANGEROUS, t_tmp_fill, "[HOLD_S]"},
    {"fd-exhaust", TOOL, NULL, 0, t_fd_exhaust, "[HOLD_S]"},
    {"cpu-spin", TOOL, NULL, 0, t_cpu_spin, "SECONDS"},
    {"unknown-syscalls", TOOL, NULL, 0, t_unknown_syscalls, "N"},
    {"kill-under-signals", TOOL, NULL, 0, t_kill_under_signals, "[ATTEMPTS]"},
    {"stacked-errno", TOOL, NULL, 0, t_stacked_errno, ""},
    /* W^X checks for levels with memory-deny-write-execute (hardened); other
     * levels allow these, so they are not in `list`. */
    {"wx-mmap", TOOL, NULL, 0, t_wx_mmap, ""},
    {"wx-mprotect", TOOL, NULL, 0, t_wx_mprotect, ""},
    {"mdwe", TOOL, NULL, 0, t_mdwe, ""},
};

#define NCHECKS (sizeof checks / sizeof checks[0])

static void print_list(int tools)
{
    for (size_t i = 0; i < NCHECKS; i++) {
        const struct check *c = &checks[i];
        if ((c->expect == TOOL) != tools)
            continue;
        switch (c->expect) {
        case KILL: printf("%s kill %s\n", c->name, c->syscall); break;
        case BLOCKED: printf("%s blocked\n", c->name); break;
        case OK: printf("%s ok\n", c->name); break;
        case SIGSYS_ABI: printf("%s sigsys\n", c->name); break;
        case TOOL: printf("%s %s\n", c->name, c->args); break;
        }
    }
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: xsb-probe CHECK [ARGS...]   run one check (see `list`, `tools`)\n"
            "       xsb-probe list              checks with expectations\n"
            "       xsb-probe tools             helper programs with their arguments\n"
            "exit: 0 blocked/ok, 1 ESCAPED/FAILED, 2 usage error or refused\n");
}

int main(int argc, char **argv)
{
    /* Line-buffered so every result line is out before a possible kill and
     * so buffered output is never duplicated into forked children. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "list") || !strcmp(name, "tools")) {
        print_list(!strcmp(name, "tools"));
        return 0;
    }
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < NCHECKS; i++) {
        const struct check *c = &checks[i];
        if (strcmp(c->name, name) != 0)
            continue;
        g_check = c->name;
        if (!c->args[0] && argc > 2)
            return usage_error("takes no arguments");
        if ((c->flags & DANGEROUS) && looks_like_host()) {
            const char *unsafe = getenv("XSB_PROBE_UNSAFE");
            if (!unsafe || strcmp(unsafe, "1") != 0)
                return usage_error("refusing to run outside a sandbox (initial user or "
                                   "PID namespace); set XSB_PROBE_UNSAFE=1 to override");
        }
        return c->run(argc - 2, argv + 2);
    }
    g_check = name;
    usage_error("unknown check (try `xsb-probe list`)");
    return 2;
}
