// The OS layer's C helpers (SandboxSystem's): epoll with a 64-bit token per registration
// (struct epoll_event is packed on x86_64, which Swift imports awkwardly), a bounded wait for
// readability and one-shot timers as descriptors; the calling thread's name. Plain system calls, no state: the host API, the
// supervisor and the CLI share them.
#ifndef XSB_SYSTEM_H
#define XSB_SYSTEM_H

#include <stdint.h>
#include <sys/epoll.h>

#ifdef __cplusplus
extern "C" {
#endif

/// epoll event bits as plain integers: Swift imports glibc's EPOLL_EVENTS as a type of its own.
enum {
    XSB_EPOLLIN = EPOLLIN,
    XSB_EPOLLOUT = EPOLLOUT,
    XSB_EPOLLERR = EPOLLERR,
    XSB_EPOLLHUP = EPOLLHUP,
};

/// At most this many events per xsb_epoll_wait call (the size of its buffer).
#define XSB_EPOLL_MAX_EVENTS 64

/// An epoll instance (close-on-exec), or -errno.
int xsb_epoll_create(void);
/// Watches `fd` for `events` (level-triggered); `token` comes back with each of its events.
/// Returns 0 or -errno.
int xsb_epoll_add(int epfd, int fd, uint32_t events, uint64_t token);
/// Stops watching `fd`. Returns 0 or -errno.
int xsb_epoll_remove(int epfd, int fd);
/// Changes the events watched for `fd`, and its token. Returns 0 or -errno.
int xsb_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token);
/// Waits for events (`timeout_ms` -1: no limit) and writes each one's token and event bits.
/// Returns the number of events (at most `max` and XSB_EPOLL_MAX_EVENTS), or -errno.
int xsb_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms);
/// Polls `fd` without sleeping, yielding the CPU between polls, for up to `budget_ns`. Returns 1
/// once it is readable (or hung up), 0 when the budget is spent, -errno on error.
int xsb_spin_until_readable(int fd, long budget_ns);

/// A timerfd (close-on-exec, non-blocking) that becomes readable once, `milliseconds` from now
/// (at least 1), or -errno.
int xsb_one_shot_timer(long milliseconds);

/// Names the calling thread (the first 15 bytes of `name`) with prctl(PR_SET_NAME), touching no
/// file under /proc. Returns 0 or -errno.
int xsb_name_this_thread(const char *name);
/// Writes the calling thread's name, NUL-terminated, into `name` (16 bytes). Returns 0 or -errno.
int xsb_this_thread_name(char name[16]);

#ifdef __cplusplus
}
#endif
#endif
