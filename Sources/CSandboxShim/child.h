// Internal to the shim: what the clone child (sandbox init and payload) shares.
// Everything declared here is async-signal-safe: raw system calls and plain memory only.
#ifndef XSB_CHILD_H
#define XSB_CHILD_H

#include "xsb_shim.h"

/// Fds the clone child keeps for itself live at or above this number (plus the extra-fd
/// count), out of the way of the payload's 0, 1, 2, 3….
#define XSB_FD_FLOOR 64

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

/// The sandbox init: never returns.
__attribute__((noreturn)) void xsb_init_main(const struct xsb_spawn_config *cfg, int control_fd);

/// The payload, in a vfork child sharing the init's fd table: never returns.
/// Announces its listener's fd number on `control_fd` before loading the filter, and reports a
/// failure on `status_fd` (a pipe the init reads when the vfork returns).
__attribute__((noreturn)) void xsb_payload_main(const struct xsb_spawn_config *cfg, int control_fd, int status_fd);

/// Error record the payload writes on the status pipe.
struct xsb_payload_status {
    int32_t step;
    int32_t value;  ///< errno
    char detail[128];
};

#endif
