// Thin epoll wrappers for the OS layer's event monitor (EventMonitor.swift): struct epoll_event
// is packed on x86_64, which Swift imports awkwardly.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <time.h>
#include <sys/epoll.h>

#include "xsb_system.h"

int xsb_epoll_create(void) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int xsb_epoll_add(int epfd, int fd, uint32_t events, uint64_t token) {
    struct epoll_event ev = {.events = events, .data.u64 = token};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

int xsb_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token) {
    struct epoll_event ev = {.events = events, .data.u64 = token};
    return epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0 ? 0 : -errno;
}

int xsb_epoll_remove(int epfd, int fd) {
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) == 0 ? 0 : -errno;
}

int xsb_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms) {
    struct epoll_event evs[XSB_EPOLL_MAX_EVENTS];
    if (max > XSB_EPOLL_MAX_EVENTS) max = XSB_EPOLL_MAX_EVENTS;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    if (n < 0) return -errno;
    for (int i = 0; i < n; i++) {
        tokens[i] = evs[i].data.u64;
        events[i] = evs[i].events;
    }
    return n;
}

static long monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000000L + now.tv_nsec;
}

// Polls without sleeping: a sleeping thread's wake-up from another CPU is what costs most here
// (an interrupt to a halted virtual CPU), and a zero-timeout poll arms no timer. Yields between
// polls, so a thread that would answer on this CPU gets to run.
int xsb_spin_until_readable(int fd, long budget_ns) {
    long deadline = monotonic_ns() + budget_ns;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, 0);
        if (n < 0 && errno != EINTR) return -errno;
        if (n > 0) return 1;  // readable, or hung up: either way there is something to read
        if (monotonic_ns() >= deadline) return 0;
        sched_yield();
    }
}
