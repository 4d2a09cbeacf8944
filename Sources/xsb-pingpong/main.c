// xsb-pingpong: the raw reference for the host API's IPC benchmarks (scripts/bench).
//
// Two C processes over an AF_UNIX SOCK_STREAM socketpair (fork), nothing else: no framing
// library, no event loop, no threads, blocking read/write.
//
//   xsb-pingpong rtt SIZE COUNT [any|same|cross]
//       COUNT round trips: the parent writes SIZE bytes, the child reads them fully and writes
//       SIZE bytes back, the parent reads them fully. Prints each round trip's time in
//       nanoseconds, one per line. `any` (the default) leaves placement to the scheduler;
//       `same` pins both processes to one CPU, `cross` to two different CPUs (the first two
//       the process may use). A ping-pong's latency depends mostly on that placement (on a VM,
//       waking a task on another CPU costs an IPI and often an idle exit).
//   xsb-pingpong throughput SIZE COUNT
//       Once the child is ready, the parent writes COUNT messages of a 20-byte header (the wire
//       protocol's prefix and header) plus SIZE bytes, each with one writev; the child reads
//       each fully (header, then SIZE bytes into one reused buffer) and, after the last, writes
//       one byte back. Prints the nanoseconds from the first write to that byte, and the bytes
//       moved (COUNT * (20 + SIZE)), on one line.
//   xsb-pingpong extension
//       A minimal extension in C (docs/wire-protocol.md), for breaking the host API's costs
//       down: READY on fd 3, then one thread, one poll loop over the control socket and every
//       connection; HELLO answered with HELLO, each REQUEST answered at once with a REPLY of
//       the same bytes, ONEWAY dropped, GOODBYE or end of stream closes. No fds are expected
//       on connections; anything malformed ends the process (it is a benchmark, not a peer
//       to rely on).
//
// Exit status 0 on success, 1 on a failed system call, 2 on bad arguments.
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HEADER_SIZE 20

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "xsb-pingpong: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void read_fully(int fd, void *buffer, size_t size) {
    char *p = buffer;
    while (size > 0) {
        ssize_t n = read(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("read");
        if (n == 0) {
            errno = EPIPE;
            die("read: end of stream");
        }
        p += n;
        size -= (size_t)n;
    }
}

static void write_fully(int fd, const void *buffer, size_t size) {
    const char *p = buffer;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("write");
        p += n;
        size -= (size_t)n;
    }
}

// One header plus payload with writev, finishing a partial write like the host API does.
static void writev_fully(int fd, const char *header, const char *payload, size_t size) {
    size_t total = HEADER_SIZE + size, sent = 0;
    while (sent < total) {
        struct iovec iov[2];
        int count = 0;
        if (sent < HEADER_SIZE) {
            iov[count++] = (struct iovec){(void *)(header + sent), HEADER_SIZE - sent};
            iov[count++] = (struct iovec){(void *)payload, size};
        } else {
            iov[count++] = (struct iovec){(void *)(payload + (sent - HEADER_SIZE)), total - sent};
        }
        ssize_t n = writev(fd, iov, count);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("writev");
        sent += (size_t)n;
    }
}

// Pins the calling process to the index-th CPU it may run on (index 0 or 1).
static void pin(int index) {
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) die("sched_getaffinity");
    int seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed)) continue;
        if (seen++ == index) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            if (sched_setaffinity(0, sizeof one, &one) != 0) die("sched_setaffinity");
            return;
        }
    }
    errno = EINVAL;
    die("cross needs two CPUs");
}

static int reap(pid_t child) {
    int status;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) die("waitpid");
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

// ---- the extension mode ----

enum { HELLO = 1, REQUEST, REPLY, ERROR, ONEWAY, CANCEL, GOODBYE, CONNECT, READY };
#define MAX_CONNECTIONS 64

static void put_header(char *h, uint32_t payload, uint8_t kind, uint64_t id) {
    uint32_t length = htobe32(16 + payload);
    uint64_t big = htobe64(id);
    memset(h, 0, HEADER_SIZE);
    memcpy(h, &length, 4);
    h[4] = (char)kind;
    memcpy(h + 12, &big, 8);
}

static void send_frame(int fd, uint8_t kind, uint64_t id, const char *payload, uint32_t size) {
    char header[HEADER_SIZE];
    put_header(header, size, kind, id);
    writev_fully(fd, header, payload, size);
}

// Reads one frame header; 0 at end of stream, 1 with *kind, *id, *size filled in. The control
// socket's CONNECT fd arrives with the header's first byte (*fd, else -1).
static int read_header(int fd, uint8_t *kind, uint64_t *id, uint32_t *size, int *passed) {
    char h[HEADER_SIZE];
    size_t got = 0;
    *passed = -1;
    while (got < HEADER_SIZE) {
        union { struct cmsghdr align; char buf[CMSG_SPACE(16 * sizeof(int))]; } control;
        struct iovec iov = {h + got, HEADER_SIZE - got};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
        ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("recvmsg");
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
                memcpy(passed, CMSG_DATA(c), sizeof(int));
            }
        }
        if (n == 0) {
            if (got == 0) return 0;
            errno = EPROTO;
            die("truncated frame");
        }
        got += (size_t)n;
    }
    uint32_t length;
    uint64_t big;
    memcpy(&length, h, 4);
    memcpy(&big, h + 12, 8);
    *kind = (uint8_t)h[4];
    *id = be64toh(big);
    *size = be32toh(length) - 16;
    return 1;
}

static int run_extension(void) {
    const int control = 3;
    // READY carries the identifier the host launched it as (docs/wire-protocol.md §7).
    const char *name = getenv("EXTSANDBOX_EXTENSION_IDENTIFIER");
    if (name == NULL || strlen(name) > 200) name = "xsb-pingpong";
    const size_t name_length = strlen(name);
    send_frame(control, READY, 0, name, name_length);
    // HELLO payload: u16 version 1, u32 maximum frame size 16 MiB, then the name.
    char hello[6 + 200] = {0, 1, 1, 0, 0, 0};
    memcpy(hello + 6, name, name_length);
    const size_t hello_length = 6 + name_length;

    struct pollfd fds[1 + MAX_CONNECTIONS];
    int greeted[1 + MAX_CONNECTIONS] = {0};
    nfds_t count = 1;
    fds[0] = (struct pollfd){control, POLLIN, 0};
    size_t capacity = 1 << 16;
    char *payload = malloc(capacity);
    if (!payload) die("malloc");
    for (;;) {
        if (poll(fds, count, -1) < 0) {
            if (errno == EINTR) continue;
            die("poll");
        }
        for (nfds_t i = 0; i < count; i++) {
            if (!fds[i].revents) continue;
            uint8_t kind;
            uint64_t id;
            uint32_t size;
            int passed;
            int more = read_header(fds[i].fd, &kind, &id, &size, &passed);
            if (more && size > capacity) {
                capacity = size;
                payload = realloc(payload, capacity);
                if (!payload) die("realloc");
            }
            if (more && size > 0) read_fully(fds[i].fd, payload, size);
            if (i == 0) {
                if (!more) return 0;  // the host is gone
                if (kind == GOODBYE) {
                    send_frame(control, GOODBYE, 0, NULL, 0);
                    return 0;
                }
                if (kind == CONNECT && passed >= 0 && count < 1 + MAX_CONNECTIONS) {
                    greeted[count] = 0;
                    fds[count++] = (struct pollfd){passed, POLLIN, 0};
                } else if (passed >= 0) {
                    close(passed);
                }
                continue;
            }
            if (passed >= 0) close(passed);
            if (more && kind == HELLO && !greeted[i]) {
                greeted[i] = 1;
                send_frame(fds[i].fd, HELLO, 0, hello, hello_length);
            } else if (more && kind == REQUEST && greeted[i]) {
                send_frame(fds[i].fd, REPLY, id, payload, size);
            } else if (!more || kind == GOODBYE || (kind != ONEWAY && kind != CANCEL)) {
                close(fds[i].fd);
                fds[i] = fds[count - 1];
                greeted[i] = greeted[count - 1];
                count--;
                i--;
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "extension") == 0) {
        signal(SIGPIPE, SIG_IGN);
        return run_extension();
    }
    if (argc != 4 && !(argc == 5 && strcmp(argv[1], "rtt") == 0)) {
        fprintf(stderr, "usage: xsb-pingpong rtt SIZE COUNT [any|same|cross] | throughput SIZE COUNT | extension\n");
        return 2;
    }
    const char *placement = argc == 5 ? argv[4] : "any";
    int same = strcmp(placement, "same") == 0, cross = strcmp(placement, "cross") == 0;
    if (!same && !cross && strcmp(placement, "any") != 0) {
        fprintf(stderr, "xsb-pingpong: unknown placement %s\n", placement);
        return 2;
    }
    int rtt = strcmp(argv[1], "rtt") == 0;
    if (!rtt && strcmp(argv[1], "throughput") != 0) {
        fprintf(stderr, "xsb-pingpong: unknown mode %s\n", argv[1]);
        return 2;
    }
    long size = strtol(argv[2], NULL, 10), count = strtol(argv[3], NULL, 10);
    if (size <= 0 || count <= 0) {
        fprintf(stderr, "xsb-pingpong: SIZE and COUNT must be positive\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) die("socketpair");
    char *buffer = malloc((size_t)size);
    char *payload = malloc((size_t)size);
    uint64_t *samples = rtt ? calloc((size_t)count, sizeof(uint64_t)) : NULL;
    if (!buffer || !payload || (rtt && !samples)) die("malloc");
    memset(payload, 'x', (size_t)size);
    memset(buffer, 0, (size_t)size);  // touch it: no page faults inside the measurement

    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        if (same || cross) pin(cross ? 1 : 0);
        close(fds[0]);
        int fd = fds[1];
        if (rtt) {
            for (long i = 0; i < count; i++) {
                read_fully(fd, buffer, (size_t)size);
                write_fully(fd, buffer, (size_t)size);
            }
        } else {
            // Touch the buffer (copy-on-write after fork) before the parent starts its clock.
            memset(buffer, 0, (size_t)size);
            write_fully(fd, "r", 1);
            char header[HEADER_SIZE];
            for (long i = 0; i < count; i++) {
                read_fully(fd, header, HEADER_SIZE);
                read_fully(fd, buffer, (size_t)size);
            }
            write_fully(fd, "!", 1);
        }
        _exit(0);
    }
    if (same || cross) pin(0);
    close(fds[1]);
    int fd = fds[0];
    if (rtt) {
        for (long i = 0; i < count; i++) {
            uint64_t start = now_ns();
            write_fully(fd, payload, (size_t)size);
            read_fully(fd, buffer, (size_t)size);
            samples[i] = now_ns() - start;
        }
        if (reap(child) != 0) return 1;
        for (long i = 0; i < count; i++) printf("%llu\n", (unsigned long long)samples[i]);
    } else {
        char header[HEADER_SIZE] = {0};
        uint32_t length = htobe32((uint32_t)(16 + size));
        memcpy(header, &length, 4);
        header[4] = 5;  // ONEWAY
        char ready;
        read_fully(fd, &ready, 1);
        uint64_t start = now_ns();
        for (long i = 0; i < count; i++) writev_fully(fd, header, payload, (size_t)size);
        char ack;
        read_fully(fd, &ack, 1);
        uint64_t elapsed = now_ns() - start;
        if (reap(child) != 0) return 1;
        printf("%llu %llu\n", (unsigned long long)elapsed, (unsigned long long)count * (unsigned long long)(HEADER_SIZE + size));
    }
    return 0;
}
