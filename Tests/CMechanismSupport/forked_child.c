// The forked child every case runs in, and the child-side helpers the cases share. Everything
// that runs in the child is async-signal-safe: the test process has many threads.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forked_child.h"

int xsbt_run_forked(xsbt_body body, xsbt_parent_step parent, const void *context, struct xsbt_outcome *out) {
    memset(out, 0, sizeof *out);
    // The report goes through memory shared with the child, not an fd: a case may close them all.
    struct xsbt_outcome *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return -errno;
    memset(shared, 0, sizeof *shared);
    int channel[2], sync[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) != 0) {
        int err = errno;
        munmap(shared, sizeof *shared);
        return -err;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync) != 0) {
        int err = errno;
        close(channel[0]);
        close(channel[1]);
        munmap(shared, sizeof *shared);
        return -err;
    }
    pid_t pid = fork();
    if (pid == 0) {
        // A known fd table: the failure channel and the sync socket, nothing else.
        if (dup3(channel[1], XSBT_FAIL_FD, 0) < 0 || dup3(sync[1], XSBT_SYNC_FD, 0) < 0) _exit(120);
        if (syscall(SYS_close_range, 0, XSBT_FAIL_FD - 1, 0) != 0 || syscall(SYS_close_range, XSBT_SYNC_FD + 1, ~0U, 0) != 0) _exit(121);
        shared->result = body(context, shared);
        shared->returned = 1;
        _exit(0);
    }
    int err = pid < 0 ? errno : 0;
    close(channel[1]);
    close(sync[1]);
    if (pid > 0) {
        if (parent != NULL) parent(pid, sync[0], context, shared);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        memcpy(out, shared, sizeof *out);
        out->wait_status = status;
        out->failed_step = XSB_STEP_NONE;
        out->announced = -1;
        // The last failure reported: a payload's status record or an init's ERROR message
        // (the one channel tells them apart by their size); and the payload's listener
        // announcement (a status record of no step).
        union {
            struct xsb_payload_status record;
            struct xsb_msg msg;
        } m;
        ssize_t n;
        while ((n = recv(channel[0], &m, sizeof m, MSG_DONTWAIT)) > 0) {
            if (n == (ssize_t)sizeof m.record && m.record.step == XSB_STEP_NONE) {
                out->announced = m.record.value;
            } else if (n == (ssize_t)sizeof m.record) {
                out->failed_step = m.record.step;
                out->failed_errno = m.record.value;
                m.record.detail[sizeof m.record.detail - 1] = '\0';
                xsb_copy_string(out->failed_detail, sizeof out->failed_detail, m.record.detail);
            } else if (n == (ssize_t)sizeof m.msg && m.msg.type == XSB_MSG_ERROR) {
                out->failed_step = m.msg.step;
                out->failed_errno = m.msg.value;
                m.msg.detail[sizeof m.msg.detail - 1] = '\0';
                xsb_copy_string(out->failed_detail, sizeof out->failed_detail, m.msg.detail);
            }
        }
    }
    close(channel[0]);
    close(sync[0]);
    munmap(shared, sizeof *shared);
    return -err;
}

// MARK: - Sources and snapshots

/// The files of the sources, by index (the child's copy of this memory is its own).
static struct {
    dev_t dev;
    ino_t ino;
} sources[XSBT_MAX_SOURCES];
static int source_count;

int xsbt_open_sources(const struct xsbt_fd_case *setup) {
    source_count = 0;
    for (int i = 0; i < setup->source_count && i < XSBT_MAX_SOURCES; i++) {
        int fd = (int)syscall(SYS_memfd_create, "xsbt-source", 0);
        if (fd < 0) return -1;
        const char *head = i == setup->script_source ? "#!/bin/sh\n" : "\177ELF";
        if (write(fd, head, xsb_string_length(head)) < 0) return -1;
        struct stat st;
        if (fstat(fd, &st) != 0) return -1;
        sources[i].dev = st.st_dev;
        sources[i].ino = st.st_ino;
        source_count = i + 1;
        if (fd != setup->source_fds[i]) {
            if (dup3(fd, setup->source_fds[i], 0) < 0) return -1;
            close(fd);
        }
    }
    return 0;
}

void xsbt_snapshot_fds(struct xsbt_outcome *out) {
    for (int fd = 0; fd < XSBT_FD_SLOTS; fd++) {
        struct xsbt_fd_slot *slot = &out->fds[fd];
        int flags = fcntl(fd, F_GETFD);
        struct stat st;
        slot->cloexec = flags >= 0 && (flags & FD_CLOEXEC) != 0;
        if (flags < 0 || fstat(fd, &st) != 0) {
            slot->what = XSBT_FD_CLOSED;
            continue;
        }
        slot->what = XSBT_FD_OTHER;
        if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)) slot->what = XSBT_FD_DEV_NULL;
        for (int i = 0; i < source_count; i++) {
            if (sources[i].dev == st.st_dev && sources[i].ino == st.st_ino) slot->what = i;
        }
    }
}

// MARK: - Text

void xsbt_append(char *text, size_t size, const char *s) {
    size_t at = xsb_string_length(text);
    xsb_copy_string(text + at, size - at, s);
}

void xsbt_append_number(char *text, size_t size, long n) {
    char digits[24];
    size_t count = 0;
    unsigned long value = n < 0 ? (unsigned long)-n : (unsigned long)n;
    do {
        digits[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    char number[26];
    size_t at = 0;
    if (n < 0) number[at++] = '-';
    while (count > 0) number[at++] = digits[--count];
    number[at] = '\0';
    xsbt_append(text, size, number);
}

int xsbt_read_text(const char *path, char *text, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    size_t used = 0;
    ssize_t n;
    while (used + 1 < size && (n = read(fd, text + used, size - 1 - used)) > 0) used += (size_t)n;
    text[used] = '\0';
    close(fd);
    return 0;
}

/// The value after "KEY:" in /proc/self/status text, hexadecimal or decimal; -1 if absent.
static int64_t status_field(const char *text, const char *key, int base) {
    size_t length = xsb_string_length(key);
    for (const char *line = text; *line != '\0';) {
        int match = 1;
        for (size_t i = 0; i < length && match; i++) match = line[i] == key[i];
        if (match && line[length] == ':') {
            const char *p = line + length + 1;
            while (*p == ' ' || *p == '\t') p++;
            int64_t value = 0;
            for (;; p++) {
                int digit = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
                if (digit < 0 || digit >= base) break;
                value = value * base + digit;
            }
            return value;
        }
        while (*line != '\0' && *line != '\n') line++;
        if (*line == '\n') line++;
    }
    return -1;
}

void xsbt_status_fields(struct xsbt_outcome *out) {
    static const struct {
        const char *key;
        int base;
    } fields[XSBT_SECUREBITS] = {
        [XSBT_CAP_INH] = {"CapInh", 16}, [XSBT_CAP_PRM] = {"CapPrm", 16}, [XSBT_CAP_EFF] = {"CapEff", 16},
        [XSBT_CAP_BND] = {"CapBnd", 16}, [XSBT_CAP_AMB] = {"CapAmb", 16}, [XSBT_NO_NEW_PRIVS] = {"NoNewPrivs", 10},
        [XSBT_SIG_IGN] = {"SigIgn", 16}, [XSBT_SIG_CGT] = {"SigCgt", 16}, [XSBT_SIG_BLK] = {"SigBlk", 16},
    };
    if (xsbt_read_text("/proc/self/status", out->text, sizeof out->text) != 0) return;
    for (int i = 0; i < XSBT_SECUREBITS; i++) out->values[i] = status_field(out->text, fields[i].key, fields[i].base);
}

int xsbt_memfd(const void *bytes, size_t count, unsigned seals) {
    int fd = (int)syscall(SYS_memfd_create, "xsbt-description", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    for (size_t done = 0; done < count;) {
        ssize_t n = write(fd, (const char *)bytes + done, count - done);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    if (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}
