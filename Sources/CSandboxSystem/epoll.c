// Thin epoll wrappers for the OS layer's event monitor (EventMonitor.swift): struct epoll_event
// is packed on x86_64, which Swift imports awkwardly.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
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

int xsb_wait_readable(int fd, long timeout_ns) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct timespec timeout = {.tv_sec = timeout_ns / 1000000000L, .tv_nsec = timeout_ns % 1000000000L};
    int n = ppoll(&p, 1, &timeout, NULL);
    if (n < 0) return -errno;
    return n > 0 && (p.revents & POLLIN) ? 1 : 0;
}
