// The launch description: everything the sandbox init needs to build one sandbox, written by
// the supervisor into a sealed memfd (xsb_description_create) and read by the exec'd init
// (xsb_description_load). The init has an address space of its own, so the description holds
// offsets and lengths, never pointers; the init checks every one of them (bounds, alignment,
// terminating NULs, counts, known values) before it turns them into the pointers of its own
// struct xsb_spawn_config, and fails closed, naming what was wrong, on anything unexpected.
//
// Layout: one struct xsb_wire_header at offset 0, then the sections it points to (strings
// NUL-terminated, arrays 8-byte aligned), in any order; nothing points outside the file.
//
// A pre-built sandbox's description carries only the shape (everything but what is per
// launch); what is per launch comes later as the launch part (struct xsb_wire_part, same
// rules), whose fds are the ones passed beside it: inside the LAUNCH message itself when it is
// small (most are), else as a second sealed memfd (prebuilt.c).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#define MFD_ALLOW_SEALING 0x0002U
#endif

/// "XSBL": a launch description.
#define XSB_WIRE_MAGIC 0x4c425358u
/// "XSBP": a pre-built sandbox's launch part.
#define XSB_PART_MAGIC 0x50425358u
/// The largest description the init accepts (the largest real one is a few hundred KiB: a
/// filter of 65,535 instructions is 512 KiB).
#define XSB_WIRE_MAX_SIZE (64u << 20)
/// The seals the init insists on: nobody can change the description after the supervisor wrote it.
#define XSB_WIRE_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/// Bytes [offset, offset + length) of the description. A string has its NUL at offset + length.
struct xsb_wire_span {
    uint64_t offset, length;
};

struct xsb_wire_mount {
    int32_t kind, flags;
    struct xsb_wire_span source;  ///< a string; for XSB_MOUNT_FILE the file's bytes
    struct xsb_wire_span target;  ///< a string
    uint64_t size;
    uint32_t mode;
    int32_t tree;  ///< with XSB_MOUNT_F_TREE: index into the header's mount_trees
};

struct xsb_wire_header {
    uint32_t magic, version;
    uint64_t size;  ///< of the whole description
    struct xsb_wire_span path, cwd, hostname;
    struct xsb_wire_span argv, envp;  ///< arrays of struct xsb_wire_span (strings)
    struct xsb_wire_span mounts;      ///< array of struct xsb_wire_mount
    struct xsb_wire_span rlimits;     ///< array of struct xsb_rlimit
    struct xsb_wire_span bpf;         ///< struct sock_filter[]
    uint32_t uid_outside, gid_outside, uid_inside, gid_inside;
    uint64_t tmp_size;
    /// Fds as the init sees them: XSB_INIT_PASSED_FDS + i, or -1.
    int32_t passed_fd_count;
    int32_t stdio[3];
    int32_t extra_fd_count;
    int32_t extra_fds[XSB_MAX_EXTRA_FDS];
    int32_t cgroup_tasks_fds[4];
    int32_t supervise_first_exec, audit, memory_deny_write_execute, controlling_terminal;
    int32_t cap_last_cap;
    int32_t exec_fd;  ///< the program to exec by fd, or -1: exec `path`
    int32_t mount_tree_count;
    int32_t mount_trees[XSB_MAX_MOUNT_TREES];  ///< passed fds: detached mounts to attach
    /// Bit 0: nothing per launch here; a launch part comes with XSB_MSG_LAUNCH. Bit 1 (with
    /// bit 0): the payload waits for it, started with the shape.
    int32_t prebuilt;
};

/// What is per launch in a pre-built sandbox. Fds are indexes into the fds passed beside it
/// (0 … passed_fd_count - 1), or -1.
struct xsb_wire_part {
    uint32_t magic, version;
    uint64_t size;
    struct xsb_wire_span path, cwd;
    struct xsb_wire_span argv, envp;
    int32_t passed_fd_count;
    int32_t stdio[3];
    int32_t extra_fd_count;
    int32_t extra_fds[XSB_MAX_EXTRA_FDS];
    int32_t exec_fd;
};

// MARK: - Supervisor side

static uint64_t align8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/// Appends `length` bytes (and a NUL when `terminate`) at 8-byte alignment; returns their span.
static struct xsb_wire_span put(char *blob, uint64_t *used, const void *bytes, uint64_t length, int terminate) {
    struct xsb_wire_span span = {.offset = align8(*used), .length = length};
    if (length > 0) memcpy(blob + span.offset, bytes, length);
    if (terminate) blob[span.offset + length] = '\0';
    *used = span.offset + length + (terminate ? 1 : 0);
    return span;
}

static uint64_t string_room(const char *s) { return align8(xsb_string_length(s) + 1); }

static int sealed_memfd(const char *name, char *blob, uint64_t size, int *fd_out);

static struct xsb_wire_span put_string(char *blob, uint64_t *used, const char *s) {
    return put(blob, used, s == NULL ? "" : s, xsb_string_length(s), 1);
}

static size_t count_strings(char *const *list) {
    size_t n = 0;
    while (list != NULL && list[n] != NULL) n++;
    return n;
}

/// Writes the string array `list` (its spans first, then the strings).
static struct xsb_wire_span put_strings(char *blob, uint64_t *used, char *const *list) {
    size_t count = count_strings(list);
    struct xsb_wire_span array = {.offset = align8(*used), .length = count * sizeof(struct xsb_wire_span)};
    *used = array.offset + array.length;
    for (size_t i = 0; i < count; i++) {
        struct xsb_wire_span s = put_string(blob, used, list[i]);
        memcpy(blob + array.offset + i * sizeof s, &s, sizeof s);
    }
    return array;
}

/// Where a host fd goes in the init: the next passed slot (or -1 for none).
static int32_t pass(struct xsb_passed_fds *passed, int host_fd) {
    if (host_fd < 0) return -1;
    passed->host[passed->count] = host_fd;
    return XSB_INIT_PASSED_FDS + passed->count++;
}

/// Zeroed room for a description or launch part of `size` bytes (NULL with errno: too large, no memory).
static char *new_blob(uint64_t size) {
    if (size > XSB_WIRE_MAX_SIZE) {
        errno = E2BIG;
        return NULL;
    }
    return calloc(1, size);
}

/// Room for the strings of a launch: path, working directory, arguments and environment.
static uint64_t launch_strings_room(const struct xsb_spawn_config *cfg) {
    uint64_t size = string_room(cfg->path) + string_room(cfg->cwd);
    char *const *lists[2] = {cfg->argv, cfg->envp};
    for (int l = 0; l < 2; l++) {
        size_t n = count_strings(lists[l]);
        size += align8(n * sizeof(struct xsb_wire_span));
        for (size_t i = 0; i < n; i++) size += string_room(lists[l][i]);
    }
    return size;
}

/// The same for a launch part: the index of the passed fd (or -1).
static int32_t pass_index(struct xsb_passed_fds *passed, int host_fd) {
    int32_t at = pass(passed, host_fd);
    return at < 0 ? -1 : at - XSB_INIT_PASSED_FDS;
}

int xsb_description_create(const struct xsb_spawn_config *cfg, struct xsb_passed_fds *passed, int *fd_out) {
    *fd_out = -1;
    passed->count = 0;
    if (cfg->extra_fd_count > XSB_MAX_EXTRA_FDS || cfg->mount_tree_count > XSB_MAX_MOUNT_TREES || cfg->mount_count > (1u << 20) ||
        cfg->rlimit_count > 64) {
        errno = E2BIG;
        return -1;
    }
    // Room: the header, then each section at 8-byte alignment (strings with their NUL).
    uint64_t size = align8(sizeof(struct xsb_wire_header));
    size += launch_strings_room(cfg) + string_room(cfg->hostname);
    size += align8(cfg->mount_count * sizeof(struct xsb_wire_mount));
    for (size_t i = 0; i < cfg->mount_count; i++) {
        const struct xsb_mount_op *op = &cfg->mounts[i];
        size += string_room(op->target);
        size += op->kind == XSB_MOUNT_FILE ? align8(op->size + 1) : string_room(op->source);
    }
    size += align8(cfg->rlimit_count * sizeof(struct xsb_rlimit));
    size += align8(cfg->bpf_instructions * 8);
    char *blob = new_blob(size);
    if (blob == NULL) return -1;
    struct xsb_wire_header h;
    memset(&h, 0, sizeof h);
    uint64_t used = sizeof h;
    h.magic = XSB_WIRE_MAGIC;
    h.version = XSB_LAUNCH_FORMAT_VERSION;
    h.path = put_string(blob, &used, cfg->path);
    h.cwd = put_string(blob, &used, cfg->cwd);
    h.hostname = put_string(blob, &used, cfg->hostname);
    h.argv = put_strings(blob, &used, cfg->argv);
    h.envp = put_strings(blob, &used, cfg->envp);
    h.mounts = (struct xsb_wire_span){.offset = align8(used), .length = cfg->mount_count * sizeof(struct xsb_wire_mount)};
    used = h.mounts.offset + h.mounts.length;
    for (size_t i = 0; i < cfg->mount_count; i++) {
        const struct xsb_mount_op *op = &cfg->mounts[i];
        struct xsb_wire_mount m;
        memset(&m, 0, sizeof m);
        m.kind = op->kind;
        m.flags = op->flags;
        m.size = op->size;
        m.mode = op->mode;
        m.tree = (op->flags & XSB_MOUNT_F_TREE) ? op->tree : -1;
        m.target = put_string(blob, &used, op->target);
        m.source = op->kind == XSB_MOUNT_FILE ? put(blob, &used, op->source, op->size, 1) : put_string(blob, &used, op->source);
        memcpy(blob + h.mounts.offset + i * sizeof m, &m, sizeof m);
    }
    h.rlimits = put(blob, &used, cfg->rlimits, cfg->rlimit_count * sizeof(struct xsb_rlimit), 0);
    h.bpf = put(blob, &used, cfg->bpf, cfg->bpf_instructions * 8, 0);
    h.size = size;
    h.uid_outside = cfg->uid_outside;
    h.gid_outside = cfg->gid_outside;
    h.uid_inside = cfg->uid_inside;
    h.gid_inside = cfg->gid_inside;
    h.tmp_size = cfg->tmp_size;
    for (int i = 0; i < 3; i++) h.stdio[i] = pass(passed, cfg->stdio[i]);
    h.extra_fd_count = (int32_t)cfg->extra_fd_count;
    for (size_t i = 0; i < cfg->extra_fd_count; i++) h.extra_fds[i] = pass(passed, cfg->extra_fds[i]);
    for (int i = 0; i < 4; i++) h.cgroup_tasks_fds[i] = pass(passed, cfg->cgroup_tasks_fds[i]);
    h.exec_fd = pass(passed, cfg->exec_fd);
    h.mount_tree_count = (int32_t)cfg->mount_tree_count;
    for (size_t i = 0; i < cfg->mount_tree_count; i++) h.mount_trees[i] = pass(passed, cfg->mount_trees[i]);
    h.passed_fd_count = passed->count;
    h.supervise_first_exec = cfg->supervise_first_exec != 0;
    h.audit = cfg->audit != 0;
    h.memory_deny_write_execute = cfg->memory_deny_write_execute != 0;
    h.controlling_terminal = cfg->controlling_terminal != 0;
    h.cap_last_cap = cfg->cap_last_cap;
    h.prebuilt = (cfg->prebuilt != 0) | (cfg->prebuilt != 0 && cfg->waiting_payload != 0) << 1;
    memcpy(blob, &h, sizeof h);
    return sealed_memfd("xsb-launch", blob, size, fd_out);
}

/// Writes `blob` (`size` bytes, freed here) into a new memfd sealed against every change.
static int sealed_memfd(const char *name, char *blob, uint64_t size, int *fd_out) {
    int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int rc = fd < 0 ? -1 : 0;
    for (uint64_t done = 0; rc == 0 && done < size;) {
        ssize_t n = write(fd, blob + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) rc = -1;
        else done += (uint64_t)n;
    }
    if (rc == 0 && fcntl(fd, F_ADD_SEALS, XSB_WIRE_SEALS) != 0) rc = -1;
    int saved = errno;
    free(blob);
    if (rc != 0) {
        if (fd >= 0) close(fd);
        errno = saved;
        return -1;
    }
    *fd_out = fd;
    return 0;
}

int xsb_launch_part_write(const struct xsb_spawn_config *cfg, struct xsb_passed_fds *passed, char **blob_out, uint64_t *size_out) {
    *blob_out = NULL;
    *size_out = 0;
    passed->count = 0;
    if (cfg->extra_fd_count > XSB_MAX_EXTRA_FDS) {
        errno = E2BIG;
        return -1;
    }
    uint64_t size = align8(sizeof(struct xsb_wire_part)) + launch_strings_room(cfg);
    char *blob = new_blob(size);
    if (blob == NULL) return -1;
    struct xsb_wire_part p;
    memset(&p, 0, sizeof p);
    uint64_t used = sizeof p;
    p.magic = XSB_PART_MAGIC;
    p.version = XSB_LAUNCH_FORMAT_VERSION;
    p.size = size;
    p.path = put_string(blob, &used, cfg->path);
    p.cwd = put_string(blob, &used, cfg->cwd);
    p.argv = put_strings(blob, &used, cfg->argv);
    p.envp = put_strings(blob, &used, cfg->envp);
    // Indexes into the fds passed beside the part, not the init's fd numbers.
    for (int i = 0; i < 3; i++) p.stdio[i] = pass_index(passed, cfg->stdio[i]);
    p.extra_fd_count = (int32_t)cfg->extra_fd_count;
    for (size_t i = 0; i < cfg->extra_fd_count; i++) p.extra_fds[i] = pass_index(passed, cfg->extra_fds[i]);
    p.exec_fd = pass_index(passed, cfg->exec_fd);
    p.passed_fd_count = passed->count;
    memcpy(blob, &p, sizeof p);
    *blob_out = blob;
    *size_out = size;
    return 0;
}

int xsb_launch_part_seal(char *blob, uint64_t size, int *fd_out) { return sealed_memfd("xsb-launch-part", blob, size, fd_out); }

int xsb_launch_part_create(const struct xsb_spawn_config *cfg, struct xsb_passed_fds *passed, int *fd_out) {
    *fd_out = -1;
    char *blob;
    uint64_t size;
    if (xsb_launch_part_write(cfg, passed, &blob, &size) != 0) return -1;
    return xsb_launch_part_seal(blob, size, fd_out);
}

// MARK: - Init side

/// The description's mapping and the private memory its offsets became (for xsb_description_unload).
static struct {
    void *address;
    uint64_t size;
} mappings[8];

static void remember(void *address, uint64_t size) {
    for (int i = 0; i < 8; i++) {
        if (mappings[i].address == NULL) {
            mappings[i].address = address;
            mappings[i].size = size;
            return;
        }
    }
}

/// A launch part received inside the LAUNCH message (its pages are given back at unload: the
/// init received it after joining the sandbox's cgroups, which would be charged for them).
static struct {
    const char *base;
    uint64_t size;
} received_part;

void xsb_launch_part_received(const char *base, uint64_t size) {
    received_part.base = base;
    received_part.size = size;
}

void xsb_description_unload(void) {
    for (int i = 0; i < 8; i++) {
        if (mappings[i].address != NULL) (void)munmap(mappings[i].address, mappings[i].size);
        mappings[i].address = NULL;
    }
    if (received_part.base != NULL && (uintptr_t)received_part.base % 4096 == 0) {
        uint64_t length = (received_part.size + 4095) & ~(uint64_t)4095;
        (void)xsb_raw_syscall(SYS_madvise, (long)received_part.base, (long)length, MADV_DONTNEED, 0, 0);
    }
    received_part.base = NULL;
}

/// Why a description was refused: what, for the launch's error message.
static const char *refusal;

static int refuse(const char *what) {
    refusal = what;
    errno = EINVAL;
    return -1;
}

/// The span lies inside the description (no overflow in the sum).
static int inside(const struct xsb_wire_span *span, uint64_t size) {
    return span->offset <= size && span->length <= size - span->offset;
}

/// A NUL-terminated string of exactly `length` bytes (no NUL before its end); NULL otherwise.
static const char *string_at(const char *base, uint64_t size, const struct xsb_wire_span *span) {
    if (!inside(span, size) || span->length >= size - span->offset) return NULL;  // room for the NUL
    const char *s = base + span->offset;
    if (s[span->length] != '\0' || memchr(s, '\0', span->length) != NULL) return NULL;
    return s;
}

/// An array of `element`-sized entries: 8-byte aligned, whole entries. Returns the count or -1.
static int64_t array_at(const struct xsb_wire_span *span, uint64_t size, uint64_t element) {
    if (!inside(span, size) || span->offset % 8 != 0 || span->length % element != 0) return -1;
    return (int64_t)(span->length / element);
}

/// Private memory for what the description's offsets become (pointer arrays, mount ops).
static void *scratch(uint64_t bytes) {
    if (bytes == 0) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    remember(p, bytes);
    return p;
}

static int load_strings(const char *base, uint64_t size, const struct xsb_wire_span *span, char ***out, const char *what) {
    int64_t count = array_at(span, size, sizeof(struct xsb_wire_span));
    if (count < 0) return refuse(what);
    char **list = scratch(((uint64_t)count + 1) * sizeof(char *));
    if (list == NULL) return refuse("memory for the argument and environment lists");
    for (int64_t i = 0; i < count; i++) {
        struct xsb_wire_span s;
        memcpy(&s, base + span->offset + (uint64_t)i * sizeof s, sizeof s);
        const char *text = string_at(base, size, &s);
        if (text == NULL) return refuse(what);
        list[i] = (char *)text;
    }
    list[count] = NULL;
    *out = list;
    return 0;
}

/// -1 or a passed fd.
static int passed_fd(int32_t fd, int32_t passed_count) {
    return fd == -1 || (fd >= XSB_INIT_PASSED_FDS && fd < XSB_INIT_PASSED_FDS + passed_count);
}

static int absolute(const char *path) { return path != NULL && path[0] == '/'; }

/// Absolute, with no "." or ".." component. The init walks mount targets component by component
/// from the new root and opens bind sources below /oldroot, and ".." would climb out of either
/// (a target "/../oldroot/…" reaches the host's file system). The supervisor never writes one
/// (MountPlan.swift normalizes targets, BindSource.swift resolves sources to real paths): a
/// description that has one is not the supervisor's.
static int plain_absolute(const char *path) {
    if (!absolute(path)) return 0;
    for (const char *p = path; *p != '\0';) {
        while (*p == '/') p++;
        const char *end = p;
        while (*end != '\0' && *end != '/') end++;
        size_t length = (size_t)(end - p);
        if ((length == 1 && p[0] == '.') || (length == 2 && p[0] == '.' && p[1] == '.')) return 0;
        p = end;
    }
    return 1;
}

/// Maps the sealed memfd `fd` of at least `least` bytes. Returns its base (and `*size`), or
/// NULL with errno set and `*what` naming the failure.
static const char *map_sealed(int fd, uint64_t least, uint64_t *size, const char **what) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *what = "launch description (fstat)";
        return NULL;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)least || (uint64_t)st.st_size > XSB_WIRE_MAX_SIZE) {
        *what = "launch description: not a description (type or size)";
        errno = EINVAL;
        return NULL;
    }
    if (seals < 0 || (seals & XSB_WIRE_SEALS) != XSB_WIRE_SEALS) {
        *what = "launch description: not sealed";
        errno = seals < 0 ? errno : EPERM;
        return NULL;
    }
    *size = (uint64_t)st.st_size;
    const char *base = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
        *what = "launch description (mmap)";
        return NULL;
    }
    remember((void *)base, *size);
    return base;
}

/// The program's path in a description: absolute, or, in a pre-built sandbox's, empty (it
/// comes with the launch part).
static int per_launch_path(const char *path, int32_t prebuilt) {
    return prebuilt ? path != NULL && path[0] == '\0' : absolute(path);
}

int xsb_description_load(int fd, struct xsb_spawn_config *cfg, const char **what) {
    refusal = "launch description";
    memset(cfg, 0, sizeof *cfg);
    uint64_t size = 0;
    const char *base = map_sealed(fd, sizeof(struct xsb_wire_header), &size, what);
    if (base == NULL) return -1;
    int rc = 0;
    struct xsb_wire_header h;
    memcpy(&h, base, sizeof h);
    if (h.magic != XSB_WIRE_MAGIC) rc = refuse("launch description: bad magic");
    else if (h.version != XSB_LAUNCH_FORMAT_VERSION)
        rc = refuse("launch description: another version (the sandbox init and the supervisor come from different builds)");
    else if (h.size != size) rc = refuse("launch description: size");
    else if ((h.prebuilt & ~3) != 0 || h.prebuilt == 2) rc = refuse("launch description: flags");
    if (rc == 0) {
        cfg->path = string_at(base, size, &h.path);
        cfg->cwd = string_at(base, size, &h.cwd);
        cfg->hostname = string_at(base, size, &h.hostname);
        if (!per_launch_path(cfg->path, h.prebuilt)) rc = refuse("launch description: program path");
        else if (!per_launch_path(cfg->cwd, h.prebuilt)) rc = refuse("launch description: working directory");
        else if (cfg->hostname == NULL || h.hostname.length == 0 || h.hostname.length > 64) rc = refuse("launch description: hostname");
    }
    char **argv = NULL, **envp = NULL;
    if (rc == 0) rc = load_strings(base, size, &h.argv, &argv, "launch description: arguments");
    if (rc == 0 && argv[0] == NULL && !h.prebuilt) rc = refuse("launch description: no arguments (argv[0])");
    if (rc == 0) rc = load_strings(base, size, &h.envp, &envp, "launch description: environment");
    if (rc == 0 && h.prebuilt && (argv[0] != NULL || envp[0] != NULL))
        rc = refuse("launch description: a pre-built sandbox's arguments or environment (they come with the launch)");
    cfg->argv = argv;
    cfg->envp = envp;

    int64_t mounts = rc == 0 ? array_at(&h.mounts, size, sizeof(struct xsb_wire_mount)) : -1;
    struct xsb_mount_op *ops = NULL;
    if (rc == 0 && mounts < 0) rc = refuse("launch description: mount list");
    if (rc == 0 && (ops = scratch((uint64_t)mounts * sizeof *ops)) == NULL) rc = refuse("memory for the mount list");
    for (int64_t i = 0; rc == 0 && i < mounts; i++) {
        struct xsb_wire_mount m;
        memcpy(&m, base + h.mounts.offset + (uint64_t)i * sizeof m, sizeof m);
        struct xsb_mount_op *op = &ops[i];
        op->kind = m.kind;
        op->flags = m.flags;
        op->size = m.size;
        op->mode = m.mode;
        op->tree = m.tree;
        op->target = string_at(base, size, &m.target);
        if (!plain_absolute(op->target)) rc = refuse("launch description: a mount's target");
        // XSB_MOUNT_F_DEVICE (a writable bind that keeps device nodes usable) is only for the
        // init's own /dev nodes (mounts.c), never one the description asks for.
        // XSB_MOUNT_F_ABSENT only means something on a mask.
        else if ((m.flags & ~(XSB_MOUNT_F_WRITABLE | XSB_MOUNT_F_DIRECTORY | XSB_MOUNT_F_NOEXEC | XSB_MOUNT_F_TREE | XSB_MOUNT_F_ABSENT)) != 0 ||
                 ((m.flags & XSB_MOUNT_F_ABSENT) && m.kind != XSB_MOUNT_MASK) || (m.mode & ~07777u) != 0)
            rc = refuse("launch description: a mount's flags or mode");
        // A detached mount is a bind's source, one the header lists; nothing else has one.
        else if ((m.flags & XSB_MOUNT_F_TREE) ? (m.kind != XSB_MOUNT_BIND || h.mount_tree_count < 0 ||
                                                 h.mount_tree_count > XSB_MAX_MOUNT_TREES || m.tree < 0 || m.tree >= h.mount_tree_count)
                                              : m.tree != -1)
            rc = refuse("launch description: a mount's detached source");
        else if (m.kind == XSB_MOUNT_FILE) {
            // The file's bytes: any bytes, `size` of them, NUL after them.
            if (m.source.length != m.size || !inside(&m.source, size) || m.source.length >= size - m.source.offset)
                rc = refuse("launch description: a file's contents");
            else op->source = base + m.source.offset;
        } else if (m.kind == XSB_MOUNT_BIND || m.kind == XSB_MOUNT_SYMLINK || m.kind == XSB_MOUNT_TMPFS || m.kind == XSB_MOUNT_MASK) {
            op->source = string_at(base, size, &m.source);
            if (op->source == NULL || (m.kind == XSB_MOUNT_BIND && !plain_absolute(op->source)) || (m.kind == XSB_MOUNT_SYMLINK && m.source.length == 0))
                rc = refuse("launch description: a mount's source");
        } else {
            rc = refuse("launch description: a mount's kind");
        }
    }
    cfg->mounts = ops;
    cfg->mount_count = mounts > 0 ? (size_t)mounts : 0;

    int64_t rlimits = rc == 0 ? array_at(&h.rlimits, size, sizeof(struct xsb_rlimit)) : -1;
    if (rc == 0 && rlimits < 0) rc = refuse("launch description: resource limits");
    for (int64_t i = 0; rc == 0 && i < rlimits; i++) {
        const struct xsb_rlimit *limit = (const struct xsb_rlimit *)(base + h.rlimits.offset) + i;
        if (limit->resource < 0 || limit->resource >= RLIMIT_NLIMITS || limit->soft > limit->hard)
            rc = refuse("launch description: a resource limit");
    }
    if (rc == 0) {
        cfg->rlimits = (const struct xsb_rlimit *)(base + h.rlimits.offset);
        cfg->rlimit_count = (size_t)rlimits;
    }

    int64_t instructions = rc == 0 ? array_at(&h.bpf, size, 8) : -1;
    if (rc == 0 && (instructions < 1 || instructions > 0xffff)) rc = refuse("launch description: seccomp filter");
    if (rc == 0) {
        cfg->bpf = base + h.bpf.offset;
        cfg->bpf_instructions = (size_t)instructions;
    }

    if (rc == 0) {
        int ok = h.passed_fd_count >= 0 && h.passed_fd_count <= 3 + XSB_MAX_EXTRA_FDS + 4 + 1 + XSB_MAX_MOUNT_TREES &&
                 h.extra_fd_count >= 0 && h.extra_fd_count <= XSB_MAX_EXTRA_FDS &&
                 h.mount_tree_count >= 0 && h.mount_tree_count <= XSB_MAX_MOUNT_TREES;
        for (int i = 0; ok && i < 3; i++) ok = passed_fd(h.stdio[i], h.passed_fd_count);
        for (int i = 0; ok && i < h.extra_fd_count; i++) ok = h.extra_fds[i] != -1 && passed_fd(h.extra_fds[i], h.passed_fd_count);
        for (int i = 0; ok && i < 4; i++) ok = passed_fd(h.cgroup_tasks_fds[i], h.passed_fd_count);
        if (ok) ok = passed_fd(h.exec_fd, h.passed_fd_count);
        for (int i = 0; ok && i < h.mount_tree_count; i++) ok = h.mount_trees[i] != -1 && passed_fd(h.mount_trees[i], h.passed_fd_count);
        if (!ok) rc = refuse("launch description: file descriptors");
    }
    if (rc == 0 && ((h.supervise_first_exec | h.audit | h.memory_deny_write_execute | h.controlling_terminal) & ~1) != 0)
        rc = refuse("launch description: flags");
    // A pre-built sandbox gets its fds with the launch, and is never given a terminal.
    if (rc == 0 && h.prebuilt &&
        (h.stdio[0] != -1 || h.stdio[1] != -1 || h.stdio[2] != -1 || h.extra_fd_count != 0 || h.exec_fd != -1 || h.controlling_terminal))
        rc = refuse("launch description: a pre-built sandbox's fds or terminal (they come with the launch)");
    if (rc == 0 && (h.cap_last_cap < 0 || h.cap_last_cap > 63)) rc = refuse("launch description: cap_last_cap");
    if (rc != 0) {
        *what = refusal;
        return -1;
    }
    cfg->uid_outside = h.uid_outside;
    cfg->gid_outside = h.gid_outside;
    cfg->uid_inside = h.uid_inside;
    cfg->gid_inside = h.gid_inside;
    cfg->tmp_size = h.tmp_size;
    for (int i = 0; i < 3; i++) cfg->stdio[i] = h.stdio[i];
    static int extra[XSB_MAX_EXTRA_FDS];
    for (int i = 0; i < h.extra_fd_count; i++) extra[i] = h.extra_fds[i];
    cfg->extra_fds = extra;
    cfg->extra_fd_count = (size_t)h.extra_fd_count;
    for (int i = 0; i < 4; i++) cfg->cgroup_tasks_fds[i] = h.cgroup_tasks_fds[i];
    cfg->exec_fd = h.exec_fd;
    static int trees[XSB_MAX_MOUNT_TREES];
    for (int i = 0; i < h.mount_tree_count; i++) trees[i] = h.mount_trees[i];
    cfg->mount_trees = trees;
    cfg->mount_tree_count = (size_t)h.mount_tree_count;
    cfg->cgroup_directory_fd = -1;
    cfg->init_fd = -1;
    cfg->supervise_first_exec = h.supervise_first_exec;
    cfg->audit = h.audit;
    cfg->memory_deny_write_execute = h.memory_deny_write_execute;
    cfg->controlling_terminal = h.controlling_terminal;
    cfg->cap_last_cap = h.cap_last_cap;
    cfg->prebuilt = h.prebuilt & 1;
    cfg->waiting_payload = (h.prebuilt & 2) != 0;
    return 0;
}

/// -1, or an index of the fds passed beside a launch part, as the init's fd number.
static int part_fd(int32_t index, const int *passed, int32_t passed_count, int *fd) {
    if (index == -1) {
        *fd = -1;
        return 1;
    }
    if (index < 0 || index >= passed_count) return 0;
    *fd = passed[index];
    return 1;
}

int xsb_launch_part_load(int fd, const int *passed, int passed_count, struct xsb_spawn_config *cfg, const char **what) {
    uint64_t size = 0;
    const char *base = map_sealed(fd, sizeof(struct xsb_wire_part), &size, what);
    if (base == NULL) return -1;
    return xsb_launch_part_load_bytes(base, size, passed, passed_count, cfg, what);
}

int xsb_launch_part_load_bytes(const char *base, uint64_t size, const int *passed, int passed_count, struct xsb_spawn_config *cfg,
                               const char **what) {
    refusal = "launch description";
    if (size < sizeof(struct xsb_wire_part) || size > XSB_WIRE_MAX_SIZE || (uintptr_t)base % 8 != 0) {
        *what = "launch description: not a description (type or size)";
        errno = EINVAL;
        return -1;
    }
    int rc = 0;
    struct xsb_wire_part p;
    memcpy(&p, base, sizeof p);
    if (p.magic != XSB_PART_MAGIC) rc = refuse("launch description: the launch part's magic");
    else if (p.version != XSB_LAUNCH_FORMAT_VERSION) rc = refuse("launch description: the launch part's version");
    else if (p.size != size) rc = refuse("launch description: the launch part's size");
    const char *path = NULL, *cwd = NULL;
    if (rc == 0) {
        path = string_at(base, size, &p.path);
        cwd = string_at(base, size, &p.cwd);
        if (!absolute(path)) rc = refuse("launch description: program path");
        else if (!absolute(cwd)) rc = refuse("launch description: working directory");
    }
    char **argv = NULL, **envp = NULL;
    if (rc == 0) rc = load_strings(base, size, &p.argv, &argv, "launch description: arguments");
    if (rc == 0 && argv[0] == NULL) rc = refuse("launch description: no arguments (argv[0])");
    if (rc == 0) rc = load_strings(base, size, &p.envp, &envp, "launch description: environment");
    // As many fds came beside the part as it says, and it names none beyond them.
    int stdio[3], extra[XSB_MAX_EXTRA_FDS], exec_fd = -1;
    if (rc == 0) {
        int ok = p.passed_fd_count == passed_count && p.extra_fd_count >= 0 && p.extra_fd_count <= XSB_MAX_EXTRA_FDS;
        for (int i = 0; ok && i < 3; i++) ok = part_fd(p.stdio[i], passed, passed_count, &stdio[i]);
        for (int i = 0; ok && i < p.extra_fd_count; i++) ok = p.extra_fds[i] != -1 && part_fd(p.extra_fds[i], passed, passed_count, &extra[i]);
        if (ok) ok = part_fd(p.exec_fd, passed, passed_count, &exec_fd);
        if (!ok) rc = refuse("launch description: the launch part's file descriptors");
    }
    if (rc != 0) {
        *what = refusal;
        return -1;
    }
    cfg->path = path;
    cfg->cwd = cwd;
    cfg->argv = argv;
    cfg->envp = envp;
    for (int i = 0; i < 3; i++) cfg->stdio[i] = stdio[i];
    static int part_extra[XSB_MAX_EXTRA_FDS];
    for (int i = 0; i < p.extra_fd_count; i++) part_extra[i] = extra[i];
    cfg->extra_fds = part_extra;
    cfg->extra_fd_count = (size_t)p.extra_fd_count;
    cfg->exec_fd = exec_fd;
    return 0;
}

/// Checks a launch part as the init does, from a memfd (`fd` >= 0) or from `bytes` (the LAUNCH
/// message's own), with `passed_count` made-up fds beside it.
static int check_part(int fd, const char *bytes, uint64_t size, int passed_count, const char **what) {
    struct xsb_spawn_config cfg;
    memset(&cfg, 0, sizeof cfg);
    int passed[3 + XSB_MAX_EXTRA_FDS + 1];
    for (int i = 0; i < (int)(sizeof passed / sizeof passed[0]); i++) passed[i] = 100 + i;
    if (passed_count < 0 || passed_count > (int)(sizeof passed / sizeof passed[0])) {
        *what = "launch description: the launch part's file descriptors";
        return -1;
    }
    int rc = fd >= 0 ? xsb_launch_part_load(fd, passed, passed_count, &cfg, what)
                     : xsb_launch_part_load_bytes(bytes, size, passed, passed_count, &cfg, what);
    xsb_description_unload();
    return rc;
}

int xsb_launch_part_check(int fd, int passed_count, const char **what) { return check_part(fd, NULL, 0, passed_count, what); }

int xsb_launch_part_check_bytes(const void *bytes, uint64_t size, int passed_count, const char **what) {
    // At an alignment of its own, as the init receives it.
    char *copy = size > 0 && size <= XSB_WIRE_MAX_SIZE ? calloc(1, size) : NULL;
    if (copy != NULL) memcpy(copy, bytes, size);
    int rc = check_part(-1, copy != NULL ? copy : "", copy != NULL ? size : 0, passed_count, what);
    free(copy);
    return rc;
}
