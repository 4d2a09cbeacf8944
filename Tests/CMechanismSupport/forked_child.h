// Internal to CMechanismSupport: the forked child every case runs in, and what the cases share.
#ifndef XSBT_FORKED_CHILD_H
#define XSBT_FORKED_CHILD_H

#include "xsb_mechanism_support.h"

/// A case's body: runs in the forked child, with the failure channel at XSBT_FAIL_FD and the
/// sync socket at XSBT_SYNC_FD. Its return value becomes the outcome's `result`.
typedef int (*xsbt_body)(const void *context, struct xsbt_outcome *out);
/// Runs in the parent once the child is started (NULL: nothing), with the parent's end of the
/// sync socket; the child is waited for when it returns.
typedef void (*xsbt_parent_step)(pid_t child, int sync_fd, const void *context, struct xsbt_outcome *out);

/// Forks, runs `body` in the child (async-signal-safe code only), waits for it and fills `out`.
/// Returns 0, or -errno when the child could not be started.
int xsbt_run_forked(xsbt_body body, xsbt_parent_step parent, const void *context, struct xsbt_outcome *out);

/// Child side: opens memfds at the case's source numbers (the script one starting with "#!").
/// Returns 0 or -1 (errno set).
int xsbt_open_sources(const struct xsbt_fd_case *setup);
/// Child side: what each of the fds 0 ..< XSBT_FD_SLOTS is, by the sources xsbt_open_sources
/// opened (they need not be open any more: their files are remembered).
void xsbt_snapshot_fds(struct xsbt_outcome *out);

/// Child side: reads `path` into `out`'s text (NUL-terminated). 0 or -errno.
int xsbt_read_text(const char *path, char *text, size_t size);
/// Child side: the status fields (enum XSBT_CAP_INH …) of /proc/self/status into `values`.
void xsbt_status_fields(struct xsbt_outcome *out);

/// Child side: appends `s` to `text` (of `size`), always terminated.
void xsbt_append(char *text, size_t size, const char *s);
/// Child side: appends `n` in decimal.
void xsbt_append_number(char *text, size_t size, long n);

#endif
