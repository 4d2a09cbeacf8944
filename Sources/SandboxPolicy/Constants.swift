/// Symbolic names a policy may use: constants in argument conditions, and errno names.
/// x86_64 Linux values.
public enum PolicyConstants {
    /// Constants usable in `when:` conditions (combine them with `|`).
    public static let values: [String: UInt64] = [
        // clone(2) flags
        "CLONE_VM": 0x100, "CLONE_FS": 0x200, "CLONE_FILES": 0x400, "CLONE_SIGHAND": 0x800,
        "CLONE_PIDFD": 0x1000, "CLONE_PTRACE": 0x2000, "CLONE_VFORK": 0x4000, "CLONE_PARENT": 0x8000,
        "CLONE_THREAD": 0x10000, "CLONE_SYSVSEM": 0x40000, "CLONE_SETTLS": 0x80000,
        "CLONE_PARENT_SETTID": 0x100000, "CLONE_CHILD_CLEARTID": 0x200000, "CLONE_DETACHED": 0x400000,
        "CLONE_UNTRACED": 0x800000, "CLONE_CHILD_SETTID": 0x0100_0000, "CLONE_IO": 0x8000_0000,
        // clone(2) namespace flags
        "CLONE_NEWTIME": 0x80, "CLONE_NEWNS": 0x20000, "CLONE_NEWCGROUP": 0x0200_0000,
        "CLONE_NEWUTS": 0x0400_0000, "CLONE_NEWIPC": 0x0800_0000, "CLONE_NEWUSER": 0x1000_0000,
        "CLONE_NEWPID": 0x2000_0000, "CLONE_NEWNET": 0x4000_0000,
        // socket(2) address families
        "AF_UNSPEC": 0, "AF_UNIX": 1, "AF_LOCAL": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16,
        "AF_PACKET": 17, "AF_VSOCK": 40, "AF_ALG": 38, "AF_BLUETOOTH": 31, "AF_KEY": 15,
        "AF_CAN": 29, "AF_TIPC": 30, "AF_RDS": 21, "AF_XDP": 44, "AF_MCTP": 45,
        // socket(2) types and flags
        "SOCK_STREAM": 1, "SOCK_DGRAM": 2, "SOCK_RAW": 3, "SOCK_RDM": 4, "SOCK_SEQPACKET": 5,
        "SOCK_NONBLOCK": 0x800, "SOCK_CLOEXEC": 0x80000,
        // mmap(2) / mprotect(2)
        "PROT_NONE": 0, "PROT_READ": 1, "PROT_WRITE": 2, "PROT_EXEC": 4,
        "MAP_SHARED": 0x1, "MAP_PRIVATE": 0x2, "MAP_SHARED_VALIDATE": 0x3, "MAP_FIXED": 0x10,
        "MAP_ANONYMOUS": 0x20, "MAP_ANON": 0x20, "MAP_GROWSDOWN": 0x100, "MAP_DENYWRITE": 0x800,
        "MAP_EXECUTABLE": 0x1000, "MAP_LOCKED": 0x2000, "MAP_NORESERVE": 0x4000, "MAP_POPULATE": 0x8000,
        "MAP_NONBLOCK": 0x10000, "MAP_STACK": 0x20000, "MAP_HUGETLB": 0x40000, "MAP_SYNC": 0x80000,
        "MAP_FIXED_NOREPLACE": 0x100000,
        // open(2) flags
        "O_RDONLY": 0, "O_WRONLY": 1, "O_RDWR": 2, "O_ACCMODE": 3, "O_CREAT": 0x40, "O_EXCL": 0x80,
        "O_NOCTTY": 0x100, "O_TRUNC": 0x200, "O_APPEND": 0x400, "O_NONBLOCK": 0x800, "O_DSYNC": 0x1000,
        "O_ASYNC": 0x2000, "O_DIRECT": 0x4000, "O_LARGEFILE": 0x8000, "O_DIRECTORY": 0x10000,
        "O_NOFOLLOW": 0x20000, "O_NOATIME": 0x40000, "O_CLOEXEC": 0x80000, "O_SYNC": 0x101000,
        "O_PATH": 0x200000, "O_TMPFILE": 0x410000,
        // ioctl(2) requests
        "TCGETS": 0x5401, "TCSETS": 0x5402, "TIOCSCTTY": 0x540E, "TIOCGPGRP": 0x540F,
        "TIOCSPGRP": 0x5410, "TIOCSTI": 0x5412, "TIOCGWINSZ": 0x5413, "TIOCSWINSZ": 0x5414,
        "FIONREAD": 0x541B, "TIOCLINUX": 0x541C, "TIOCCONS": 0x541D, "FIONBIO": 0x5421,
        "TIOCNOTTY": 0x5422, "TIOCSETD": 0x5423, "FIONCLEX": 0x5450, "FIOCLEX": 0x5451,
        "FIOASYNC": 0x5452,
        // prctl(2) options
        "PR_SET_PDEATHSIG": 1, "PR_GET_PDEATHSIG": 2, "PR_GET_DUMPABLE": 3, "PR_SET_DUMPABLE": 4,
        "PR_SET_NAME": 15, "PR_GET_NAME": 16, "PR_GET_SECCOMP": 21, "PR_SET_SECCOMP": 22,
        "PR_CAPBSET_READ": 23, "PR_CAPBSET_DROP": 24, "PR_SET_NO_NEW_PRIVS": 38,
        "PR_GET_NO_NEW_PRIVS": 39, "PR_SET_PTRACER": 0x5961_6d61, "PR_SET_VMA": 0x5356_4d41,
        "PR_SET_MDWE": 65, "PR_GET_MDWE": 66,
        // seccomp(2) operations and prctl(PR_SET_SECCOMP) modes
        "SECCOMP_SET_MODE_STRICT": 0, "SECCOMP_SET_MODE_FILTER": 1, "SECCOMP_GET_ACTION_AVAIL": 2,
        "SECCOMP_GET_NOTIF_SIZES": 3, "SECCOMP_MODE_STRICT": 1, "SECCOMP_MODE_FILTER": 2,
        // personality(2)
        "PER_LINUX": 0, "PER_LINUX32": 0x0008, "ADDR_NO_RANDOMIZE": 0x0040000, "UNAME26": 0x0020000,
        "READ_IMPLIES_EXEC": 0x0400000, "ADDR_COMPAT_LAYOUT": 0x0200000, "MMAP_PAGE_ZERO": 0x0100000,
        "ADDR_LIMIT_32BIT": 0x0800000, "SHORT_INODE": 0x1000000, "WHOLE_SECONDS": 0x2000000,
        "STICKY_TIMEOUTS": 0x4000000, "ADDR_LIMIT_3GB": 0x8000000, "PER_QUERY": 0xFFFF_FFFF,
        // netlink(7) protocols (socket's third argument with AF_NETLINK)
        "NETLINK_ROUTE": 0, "NETLINK_SOCK_DIAG": 4, "NETLINK_AUDIT": 9, "NETLINK_KOBJECT_UEVENT": 15,
        "NETLINK_GENERIC": 16,
        // file mode bits (chmod(2), open(2), mkdir(2), mknod(2))
        "S_ISUID": 0o4000, "S_ISGID": 0o2000, "S_ISVTX": 0o1000, "S_IFREG": 0o100000,
        "S_IFCHR": 0o20000, "S_IFBLK": 0o60000, "S_IFIFO": 0o10000, "S_IFSOCK": 0o140000, "S_IFMT": 0o170000,
        // renameat2(2) flags
        "RENAME_NOREPLACE": 1, "RENAME_EXCHANGE": 2, "RENAME_WHITEOUT": 4,
    ]

    /// errno names usable in `errno` actions.
    public static let errnos: [String: Int32] = [
        "EPERM": 1, "ENOENT": 2, "ESRCH": 3, "EINTR": 4, "EIO": 5, "ENXIO": 6, "E2BIG": 7,
        "ENOEXEC": 8, "EBADF": 9, "ECHILD": 10, "EAGAIN": 11, "EWOULDBLOCK": 11, "ENOMEM": 12,
        "EACCES": 13, "EFAULT": 14, "EBUSY": 16, "EEXIST": 17, "EXDEV": 18, "ENODEV": 19,
        "ENOTDIR": 20, "EISDIR": 21, "EINVAL": 22, "ENFILE": 23, "EMFILE": 24, "ENOTTY": 25,
        "ETXTBSY": 26, "EFBIG": 27, "ENOSPC": 28, "ESPIPE": 29, "EROFS": 30, "EMLINK": 31,
        "EPIPE": 32, "EDOM": 33, "ERANGE": 34, "EDEADLK": 35, "ENAMETOOLONG": 36, "ENOLCK": 37,
        "ENOSYS": 38, "ENOTEMPTY": 39, "ELOOP": 40, "ENODATA": 61, "ETIME": 62, "EOVERFLOW": 75,
        "EILSEQ": 84, "ENOTSOCK": 88, "EDESTADDRREQ": 89, "EMSGSIZE": 90, "EPROTOTYPE": 91,
        "ENOPROTOOPT": 92, "EPROTONOSUPPORT": 93, "ESOCKTNOSUPPORT": 94, "EOPNOTSUPP": 95,
        "ENOTSUP": 95, "EPFNOSUPPORT": 96, "EAFNOSUPPORT": 97, "EADDRINUSE": 98,
        "EADDRNOTAVAIL": 99, "ENETDOWN": 100, "ENETUNREACH": 101, "ECONNABORTED": 103,
        "ECONNRESET": 104, "ENOBUFS": 105, "EISCONN": 106, "ENOTCONN": 107, "ETIMEDOUT": 110,
        "ECONNREFUSED": 111, "EHOSTUNREACH": 113, "EALREADY": 114, "EINPROGRESS": 115,
        "EDQUOT": 122, "ECANCELED": 125,
    ]

    /// The name of an errno value (the first in alphabetical order when several share it).
    public static func errnoName(_ value: Int32) -> String? {
        errnos.filter { $0.value == value }.keys.sorted().first
    }
}
