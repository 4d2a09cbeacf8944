// The supervisor's own helpers that Swift cannot express well: sealed copies of programs, detached copies of mounts and container volumes. They run in the supervisor's
// threads, never between clone and exec: the code that does is CSandboxShim's. (The event
// monitor's epoll helpers and thread naming are the OS layer's: CSandboxSystem.)
#ifndef XSB_SUPERVISOR_SUPPORT_H
#define XSB_SUPERVISOR_SUPPORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
