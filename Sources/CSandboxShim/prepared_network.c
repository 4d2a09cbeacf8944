// Network namespaces made ahead of the cold launches that take them (PreparedNetworkNamespaces.swift).
// Creating a network namespace is the dearest part of a clone (every pernet init runs): a
// supervisor that may makes them on a thread of its own, off every caller's path, with their
// loopback up, and the spawner thread enters one right before the clone (which then leaves out
// CLONE_NEWNET, so the init inherits it) and goes back right after. Only the spawner thread can
// enter it: the clone child is born in its new user namespace, which has no capability over a
// namespace its parent's user namespace owns. Each namespace is entered once, for one sandbox.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

/// The calling thread's own network namespace (namespaces are per thread), close-on-exec.
static int open_own_network(void) {
    return open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
}

int xsb_network_namespace_open_own(void) {
    int fd = open_own_network();
    return fd >= 0 ? fd : -errno;
}

int xsb_network_namespace_prepare(int home_fd, int *stranded) {
    *stranded = 0;
    if (unshare(CLONE_NEWNET) != 0) return -errno;
    int rc = 0, prepared = -1;
    if (xsb_bring_up_loopback() != 0) rc = -errno;  // network.c
    else if ((prepared = open_own_network()) < 0) rc = -errno;
    if (syscall(SYS_setns, home_fd, CLONE_NEWNET) != 0) {
        // The thread stays in the namespace it made: its caller stops preparing.
        *stranded = 1;
        rc = -errno;
        if (prepared >= 0) close(prepared);
        return rc < 0 ? rc : -EPERM;
    }
    return rc != 0 ? rc : prepared;
}

int xsb_network_namespace_thread_in_background(void) {
    // Linux's nice value is per thread: this one only (raw calls: the shim is linked into the
    // init too, whose runtime has no setpriority).
    long tid = syscall(SYS_gettid);
    return syscall(SYS_setpriority, PRIO_PROCESS, tid, 19) == 0 ? 0 : -errno;
}

/// Whether `a` and `b` are the same file (the same namespace, for namespace fds).
static int same_file(int a, int b) {
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int xsb_network_enter_prepared(int prepared_fd, int *home) {
    *home = -1;
    if (prepared_fd <= 2) return -1;
    int rc = -1;
    int own = open_own_network();
    // Never the thread's own (the host's) namespace, whatever the fd: the clone would then
    // leave the sandbox in it. (setns refuses what is not a network namespace.)
    if (own >= 0 && !same_file(own, prepared_fd) && syscall(SYS_setns, prepared_fd, CLONE_NEWNET) == 0) {
        *home = own;
        rc = 0;
    } else if (own >= 0) {
        close(own);
    }
    // Used once, and never in the clone's copy of this thread's table.
    close(prepared_fd);
    return rc;
}

int xsb_network_leave_prepared(int home) {
    if (home < 0) return 0;
    int rc = syscall(SYS_setns, home, CLONE_NEWNET) == 0 ? 0 : errno;
    close(home);
    return rc;
}
