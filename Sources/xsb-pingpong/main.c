// xsb-pingpong: the raw reference for the host API's IPC benchmarks (scripts/bench).
//
// Two C processes over an AF_UNIX SOCK_STREAM socketpair (fork), nothing else: no framing
// library, no event loop, no threads, blocking read/write.
//
//   xsb-pingpong rtt SIZE COUNT
//       COUNT round trips: the parent writes SIZE bytes, the child reads them fully and writes
//       SIZE bytes back, the parent reads them fully. Prints each round trip's time in
//       nanoseconds, one per line.
//   xsb-pingpong throughput SIZE COUNT
//       The parent writes COUNT messages of a 20-byte header (the wire protocol's prefix and
//       header) plus SIZE bytes, each with one writev; the child reads each fully (header,
//       then SIZE bytes into one reused buffer) and, after the last, writes one byte back.
//       Prints the nanoseconds from the first write to that byte, and the bytes moved
//       (COUNT * (20 + SIZE)), on one line.
//
// Exit status 0 on success, 1 on a failed system call, 2 on bad arguments.
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
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

static int reap(pid_t child) {
    int status;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) die("waitpid");
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: xsb-pingpong rtt|throughput SIZE COUNT\n");
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
        close(fds[0]);
        int fd = fds[1];
        if (rtt) {
            for (long i = 0; i < count; i++) {
                read_fully(fd, buffer, (size_t)size);
                write_fully(fd, buffer, (size_t)size);
            }
        } else {
            char header[HEADER_SIZE];
            for (long i = 0; i < count; i++) {
                read_fully(fd, header, HEADER_SIZE);
                read_fully(fd, buffer, (size_t)size);
            }
            write_fully(fd, "!", 1);
        }
        _exit(0);
    }
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
