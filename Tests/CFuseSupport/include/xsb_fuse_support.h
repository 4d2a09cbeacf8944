// Test support: a FUSE file system that hangs (Tests/ExtSandboxTests/DirectoryWatcherTests).
//
// It answers the kernel's INIT and nothing else, so every lookup under its mount point waits, as
// on a hung FUSE or NFS mount, until the connection is aborted. No libfuse: the fixture speaks
// to /dev/fuse itself.
#ifndef XSB_FUSE_SUPPORT_H
#define XSB_FUSE_SUPPORT_H

#ifdef __cplusplus
extern "C" {
#endif

/// Mounts the hanging file system on `directory` (an empty directory) and answers its INIT.
/// Returns its /dev/fuse descriptor, or -errno with the failed step in `*step`.
int xsb_fuse_hang_mount(const char *directory, const char **step);

/// Whether a request is waiting for an answer on `fuse` within `timeout_ms`: something is
/// blocked in the file system. Returns 1 (one is), 0 (none), or -errno.
int xsb_fuse_hang_wait_request(int fuse, int timeout_ms);

/// Aborts the connection (every waiting and later request fails at once), detaches the mount
/// and closes `fuse`. Never blocks, whatever is waiting in the file system.
void xsb_fuse_hang_abort(const char *directory, int fuse);

#ifdef __cplusplus
}
#endif

#endif
