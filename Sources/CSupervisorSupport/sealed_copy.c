// A sealed private copy of a program: the supervisor execs extensions through one (execveat on
// its fd), so what runs is exactly the bytes that were copied and checked, whatever happens to
// the file on disk afterwards: a rename over it, a directory swapped above it, a rewrite in place.
// A memfd with every seal set cannot be written, grown or shrunk by anyone, and the copy is
// handed on through a read-only descriptor.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xsb_supervisor_support.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

static int fail(int fd, int err) {
    if (fd >= 0) close(fd);
    return -err;
}

int xsb_sealed_copy(int source_fd, const char *name) {
    struct stat st;
    if (fstat(source_fd, &st) != 0) return -errno;
    if (!S_ISREG(st.st_mode)) return -EINVAL;
    // MFD_EXEC says "this memfd is meant to be executed" where vm.memfd_noexec asks for it to
    // be said; older kernels do not know the flag (EINVAL) and allow exec anyway.
    int copy = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
    if (copy < 0 && errno == EINVAL) copy = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (copy < 0) return -errno;
    off_t offset = 0;
    for (;;) {
        ssize_t n = sendfile(copy, source_fd, &offset, 1 << 20);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail(copy, errno);
        if (n == 0) break;
    }
    if (offset != st.st_size) return fail(copy, ESTALE);  // it grew or shrank while being copied
    if (fchmod(copy, 0555) != 0) return fail(copy, errno);
    if (fcntl(copy, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) return fail(copy, errno);
    // Whoever gets the copy gets it read-only: a fresh open of the same memfd.
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", copy);
    int readonly = open(path, O_RDONLY | O_CLOEXEC);
    int err = errno;
    close(copy);
    return readonly >= 0 ? readonly : -err;
}
