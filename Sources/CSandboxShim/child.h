// Internal to the shim: what the clone child (sandbox init and payload) shares.
// Everything declared here is async-signal-safe: raw system calls and plain memory only.
#ifndef XSB_CHILD_H
#define XSB_CHILD_H

#include "xsb_shim.h"

/// Fds the clone child keeps for itself live at or above this number (plus the extra-fd
/// count), out of the way of the payload's 0, 1, 2, 3….
#define XSB_FD_FLOOR 64

/// The sandbox init's fds when it starts (xsb-init): the control socket, the launch description
/// (a sealed memfd), then the fds the launch passes (stdio, extra fds, cgroup `tasks` files), in
/// the order the description gives. Nothing else of the supervisor's reaches it.
#define XSB_INIT_CONTROL_FD 0
#define XSB_INIT_DESCRIPTION_FD 1
#define XSB_INIT_PASSED_FDS 2

/// The launch description's format (launch_description.c). Bumped with any change to it, to
/// struct xsb_msg or to the steps, so that an init from another build refuses the launch.
#define XSB_LAUNCH_FORMAT_VERSION 1

/// Init side: maps the description behind `fd`, checks every offset, length, count and value,
/// and fills `cfg` with pointers into it. Returns 0, or -1 with errno set and `*what` naming
/// what was refused.
int xsb_description_load(int fd, struct xsb_spawn_config *cfg, const char **what);
/// Init side: releases what xsb_description_load mapped, once the payload runs (its memory is
/// charged to the supervisor, not to the sandbox).
void xsb_description_unload(void);

/// Copies at most `size - 1` bytes and always terminates (no libc string functions that may allocate).
void xsb_copy_string(char *dst, size_t size, const char *src);
size_t xsb_string_length(const char *s);
/// Writes `prefix` followed by `suffix` into `dst`; returns -1 when it does not fit.
int xsb_join_path(char *dst, size_t size, const char *prefix, const char *suffix);

/// Sends an XSB_MSG_ERROR for `step` with `err` and `detail` on the control socket.
void xsb_child_report(int control_fd, int step, int err, const char *detail);

/// Builds the sandbox's file system and pivots into it (runs in the init, as root of its
/// user namespace). Returns 0, or -1 after reporting the failing step on `control_fd`.
int xsb_setup_mounts(const struct xsb_spawn_config *cfg, int control_fd);

/// The payload, in a vfork child sharing the init's fd table: never returns.
/// Announces its listener's fd number on `announce_fd` (to the receiver thread) and
/// `status_fd` (to the init) before loading the filter, and reports a failure on `status_fd`
/// (a pipe the init reads when the vfork returns).
__attribute__((noreturn)) void xsb_payload_main(const struct xsb_spawn_config *cfg, int announce_fd, int status_fd);

/// Starts the init's notification receiver thread (receiver.c), which reads the listener
/// number from `announce_fd`, answers the filter's notifications (ending the sandbox on a
/// kill) and writes one byte on `finished_fd` once no task can use the filter any more.
/// Returns 0, or -1 with errno set.
int xsb_receiver_start(const struct xsb_spawn_config *cfg, int control_fd, int announce_fd, int finished_fd);
/// Tells the receiver the payload's vfork has returned (it exec'd or failed).
void xsb_receiver_exec_done(void);
/// Interrupts the receiver's blocked RECV, so that it notices the filter has no user left.
/// Before Linux 6.11 RECV does not return by itself then. Called from the init's main thread.
void xsb_receiver_wake(void);

/// Record the payload writes on the status pipe: first its listener's number (step
/// XSB_STEP_NONE, value = fd), then, if a step fails, that step.
struct xsb_payload_status {
    int32_t step;
    int32_t value;  ///< errno, or the listener's fd number
    char detail[128];
};

#endif
