// The supervisor's own helpers that Swift cannot express well: epoll with a 64-bit token per
// registration (struct epoll_event is packed on x86_64, which Swift imports awkwardly), a
// bounded wait for readability, naming its threads, sealed copies of programs and detached copies
// of mounts. They run in the supervisor's threads,
// never between clone and exec: the code that does is CSandboxShim's.
#ifndef XSB_SUPERVISOR_SUPPORT_H
#define XSB_SUPERVISOR_SUPPORT_H

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
/// Waits up to `timeout_ns` for `fd` to become readable (ppoll). Returns 1 when it is, 0 on
/// timeout, -errno on error.
int xsb_wait_readable(int fd, long timeout_ns);

/// Names the calling thread (what ps and top show; at most 15 bytes). Returns 0 or an errno.
int xsb_set_thread_name(const char *name);

/// A sealed private copy of the regular file open as `source_fd` (read from offset 0), for
/// exec by descriptor: a memfd named `name`, mode 0555, that nobody can write, grow or shrink,
/// returned as a new read-only, close-on-exec descriptor. -errno on failure (-ESTALE: the file
/// changed size while it was copied; -EINVAL: not a regular file).
int xsb_sealed_copy(int source_fd, const char *name);

/// A detached copy of the mount tree at host path `path` (absolute, no symlink on the way:
/// RESOLVE_NO_SYMLINKS), private (nothing propagates between it and the host's mounts), for a
/// sandbox's init to attach: open_tree(OPEN_TREE_CLONE | AT_RECURSIVE) in the caller's mount
/// namespace, which needs CAP_SYS_ADMIN there. A close-on-exec descriptor, or -errno.
int xsb_detached_tree(const char *path);

/// Mounts the ext4 image open at `image_fd` (read-write) through a loop device that frees
/// itself once unused, `nosuid,nodev,noexec`, as a detached mount: returns its fd (close-on-exec)
/// or -errno. Root only.
int xsb_volume_mount(int image_fd);
/// Places a clone of the detached mount `mount_fd` at `path` (in the caller's mount namespace):
/// 0 or -errno. The caller detaches it again (umount2 MNT_DETACH) once it is no longer needed.
int xsb_volume_place(int mount_fd, const char *path);

#ifdef __cplusplus
}
#endif
#endif
