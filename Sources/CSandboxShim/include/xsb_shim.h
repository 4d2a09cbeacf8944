// The C part of extsandbox: the code that runs between clone and exec.
//
// Swift prepares every string, array and buffer in an xsb_spawn_config (LaunchPlan.swift) and hands
// it to its spawner thread, whose one call, xsb_spawner_launch(), calls xsb_spawn_start(), which
// writes it as a launch description (offsets, not pointers) into a sealed memfd, and starts the
// sandbox init: a small static program of its own (xsb-init), exec'd in
// the new namespaces straight from a vfork-style clone that shares the supervisor's memory, so
// nothing of the supervisor's address space (or its fds) is copied into any sandbox.
//
// Process layout of one sandbox:
//   supervisor (Swift, spawner thread) --clone3(CLONE_VM|CLONE_VFORK, new user/mnt/pid/net/ipc/uts
//     ns, pidfd) + execveat(xsb-init)-->
//     sandbox init (PID 1 inside): reads the description, builds the file system, then vforks
//       payload: session, fds, rlimits, capabilities, no_new_privs, seccomp, execve
//     init stays: reaps, reports the payload's exit, stops/continues the whole sandbox; its
//       receiver thread answers the payload's seccomp notifications (kill, audit, first exec).
// Supervisor and init talk over one SOCK_SEQPACKET socket of struct xsb_msg.
#ifndef XSB_SHIM_H
#define XSB_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// One step of building the sandbox. A failing launch names the step that failed.
enum xsb_step {
    XSB_STEP_NONE = 0,
    XSB_STEP_SOCKETPAIR,
    XSB_STEP_CLONE,
    XSB_STEP_USERNS_MAP,
    XSB_STEP_CGROUP_ATTACH,
    XSB_STEP_HANDSHAKE,
    XSB_STEP_PARENT_DEATH_SIGNAL,
    XSB_STEP_CGROUP_NAMESPACE,
    XSB_STEP_HOSTNAME,
    XSB_STEP_LOOPBACK,
    XSB_STEP_MOUNT_PRIVATE,
    XSB_STEP_ROOT_TMPFS,
    XSB_STEP_PIVOT_ROOT,
    XSB_STEP_BIND_MOUNT,
    XSB_STEP_TMPFS_MOUNT,
    XSB_STEP_PROC_MOUNT,
    XSB_STEP_DEV_SETUP,
    XSB_STEP_FILE_CREATE,
    XSB_STEP_SYMLINK,
    XSB_STEP_ROOT_READONLY,
    XSB_STEP_SPAWN_PAYLOAD,
    XSB_STEP_SESSION,
    XSB_STEP_SIGNALS,
    XSB_STEP_FILE_DESCRIPTORS,
    XSB_STEP_WORKING_DIRECTORY,
    XSB_STEP_RLIMIT,
    XSB_STEP_CAPABILITIES,
    XSB_STEP_NO_NEW_PRIVS,
    XSB_STEP_SECCOMP,
    XSB_STEP_EXEC,
    XSB_STEP_TIMEOUT,
    XSB_STEP_INIT_PRIVACY,
    XSB_STEP_MEMORY_DENY_WRITE_EXECUTE,
    XSB_STEP_INIT_EXEC,           ///< starting the sandbox init (xsb-init) in the new namespaces
    XSB_STEP_LAUNCH_DESCRIPTION,  ///< writing or reading the launch description
    XSB_STEP_COUNT
};

/// Kinds of file-system operations, applied in order inside the new root.
enum xsb_mount_kind {
    XSB_MOUNT_BIND = 1,  ///< bind `source` (host path) on `target`
    XSB_MOUNT_TMPFS,     ///< tmpfs of `size` bytes on `target`
    XSB_MOUNT_SYMLINK,   ///< symlink at `target` pointing to `source`
    XSB_MOUNT_FILE,      ///< regular file at `target` with `size` bytes of `source` (read-only root)
    XSB_MOUNT_MASK,      ///< hide `target`: an empty read-only tmpfs (directory) or an unopenable file; a bind above it is bound back entry by entry
};

/// Flags of an xsb_mount_op.
enum {
    XSB_MOUNT_F_WRITABLE = 1 << 0,  ///< bind read-write (default read-only)
    XSB_MOUNT_F_DIRECTORY = 1 << 1, ///< the bind source is a directory (else a file)
    XSB_MOUNT_F_DEVICE = 1 << 2,    ///< a device node: keep it usable (no nodev)
    XSB_MOUNT_F_NOEXEC = 1 << 3,    ///< data only: nothing under it can be exec'd or mapped executable
    /// A bind whose source is the detached mount `mount_trees[tree]` that the supervisor made
    /// (`source` names its host path for messages only): for host paths the sandbox's own host
    /// id may not traverse (a root caller's sandbox is nobody; a bundle under a 0700 home).
    XSB_MOUNT_F_TREE = 1 << 4,
    /// A mask whose path did not exist on the host when the plan was made: nothing is placed at
    /// `target`, but the bind above it is bound back entry by entry all the same, so whatever the
    /// host makes there later (at the path, or in a missing directory on the way) stays out.
    XSB_MOUNT_F_ABSENT = 1 << 5,
};

/// At most this many binds come from the supervisor's detached mounts (XSB_MOUNT_F_TREE).
#define XSB_MAX_MOUNT_TREES 16

struct xsb_mount_op {
    int kind;
    int flags;
    /// Host path for binds (as seen from the old root, e.g. "/usr"), link text, or file bytes.
    const char *source;
    /// Absolute path inside the sandbox, e.g. "/usr".
    const char *target;
    uint64_t size;
    uint32_t mode;
    /// With XSB_MOUNT_F_TREE: the index of the source in the config's `mount_trees`.
    int tree;
};

struct xsb_rlimit {
    int resource;
    uint64_t soft;
    uint64_t hard;
};

struct xsb_spawn_config {
    const char *path;        ///< absolute path of the program, as seen inside (or, with `exec_fd`, its host path, for messages)
    char *const *argv;       ///< NULL-terminated
    char *const *envp;       ///< NULL-terminated
    const char *cwd;         ///< working directory inside
    const char *hostname;

    uint32_t uid_outside, gid_outside;  ///< the host ids the sandbox is (never 0: see HostIdentity.swift)
    uint32_t uid_inside, gid_inside;    ///< the one id they map to inside

    const struct xsb_mount_op *mounts;
    size_t mount_count;
    /// Detached mounts (open_tree(OPEN_TREE_CLONE) in the supervisor's mount namespace, with
    /// their attributes set) that XSB_MOUNT_F_TREE binds attach; at most XSB_MAX_MOUNT_TREES.
    const int *mount_trees;
    size_t mount_tree_count;
    uint64_t tmp_size;       ///< what /tmp and /dev/shm may hold together

    const struct xsb_rlimit *rlimits;
    size_t rlimit_count;

    const void *bpf;         ///< struct sock_filter[], compiled once per policy
    size_t bpf_instructions;

    /// Host fds that become the payload's 0, 1, 2; -1 means /dev/null.
    int stdio[3];
    /// Host fds that become the payload's 3, 4, … (the channel in later versions).
    const int *extra_fds;
    size_t extra_fd_count;
    /// The program itself, open read-only (-1: none, exec `path`). The payload execs this very
    /// file (execveat with AT_EMPTY_PATH), never a path, so what runs is what the supervisor
    /// opened and checked. A `#!` script keeps it open (not close-on-exec) as fd 3 + extra fd
    /// count: the kernel hands its interpreter /dev/fd/N to read.
    int exec_fd;

    /// cgroup v1: open, writable `tasks` files of the sandbox's cgroups (-1 = unused). The init
    /// moves itself by writing "0" to each before it does anything else: a task moving itself
    /// skips the global threadgroup lock whose RCU grace period makes a write of another pid to
    /// `cgroup.procs` or `tasks` take 5–13 ms.
    int cgroup_tasks_fds[4];
    /// cgroup v2: the sandbox's cgroup directory (-1 = none). clone3 starts the init in it
    /// (CLONE_INTO_CGROUP), so nothing is ever migrated.
    int cgroup_directory_fd;

    /// The filter notifies execve/execveat ("no exec after start"): the init lets exactly the
    /// launch's own first execve continue.
    int supervise_first_exec;
    /// Audit mode: every notified call continues (and is reported) instead of killing.
    int audit;
    /// Set the kernel's memory-deny-write-execute (PR_SET_MDWE) before the filter: no page of
    /// the program may become writable and executable, at once or in turn.
    int memory_deny_write_execute;
    /// 1: the first of the payload's fds 0–2 that is a terminal becomes its controlling terminal
    /// (TIOCSCTTY, after setsid). Only for a pseudo-terminal the caller owns and relays (the
    /// CLI's): never the caller's own terminal. 0: none.
    int controlling_terminal;

    int cap_last_cap;        ///< from /proc/sys/kernel/cap_last_cap
    int setup_timeout_ms;    ///< how long the parent waits for the payload's exec
    /// The sandbox init executable (xsb-init), open O_PATH after its checks; the supervisor
    /// execs it by this fd (execveat), so it cannot be swapped. Not part of the description.
    int init_fd;
    /// 1: a pre-built sandbox. The init builds the shape (namespaces, ids, cgroups, hostname,
    /// loopback, file system), reports XSB_MSG_PREBUILT and waits for XSB_MSG_LAUNCH, which
    /// brings what is per launch (xsb_prebuilt_launch). The description then carries nothing
    /// per launch: no program, arguments, environment, working directory or fds, and never a
    /// controlling terminal.
    int prebuilt;
    /// 1 (pre-built only): the payload is started with the shape and waits for the launch with
    /// every step that depends only on the shape done, its filter loaded (waiting_payload.c).
    /// Only for a filter that allows every call it makes after loading it, whatever their
    /// pointers: `read` of XSB_WAITING_PAYLOAD_GO_FD, `write` of a record to
    /// XSB_WAITING_PAYLOAD_STATUS_FD, `exit_group` and, unless the working directory is "/",
    /// `chdir` (LaunchPlan.swift).
    int waiting_payload;
};

/// The fd numbers a waiting payload reads its go-ahead from and writes its status records to
/// (waiting_payload.c): below the init's own fds, above every fd a launch places for the
/// payload (0 … 3 + XSB_MAX_EXTRA_FDS). Fixed, so that the supervisor can check what the filter
/// does with those very calls.
#define XSB_WAITING_PAYLOAD_GO_FD 63
#define XSB_WAITING_PAYLOAD_STATUS_FD 62
/// The size of one status record the payload writes (struct xsb_payload_status).
#define XSB_PAYLOAD_STATUS_RECORD_SIZE 136

/// Values of xsb_spawn_result.early_violation and of an XSB_MSG_VIOLATION's value besides a
/// syscall number.
enum {
    XSB_NO_VIOLATION = -1,
    /// A call the filter stops was attempted, but a signal withdrew it before the init read
    /// it: its number is unknown.
    XSB_UNNAMED_VIOLATION = -2,
};

struct xsb_spawn_result {
    pid_t pid;          ///< the sandbox init, in the supervisor's PID namespace
    int pidfd;          ///< pidfd of the init (close-on-exec)
    int control_fd;     ///< SOCK_SEQPACKET to the init (close-on-exec)
    pid_t payload_pid;  ///< the payload's pid inside the sandbox (0 when a violation came first)
    /// A syscall the filter stopped before the launch returned (XSB_NO_VIOLATION: none;
    /// XSB_UNNAMED_VIOLATION: one whose number is unknown). The sandbox is ending by itself;
    /// the caller records it (and may kill to be sure).
    int early_violation;
    /// Audit mode: calls the filter would have stopped before the launch returned.
    int audited[32];
    int audited_count;
    /// A pre-built sandbox reported XSB_MSG_PREBUILT: its shape is built and it waits for
    /// xsb_prebuilt_launch (no payload runs yet).
    int prebuilt;
    int failed_step;    ///< enum xsb_step, XSB_STEP_NONE on success
    int error_number;   ///< errno of the failed step
    char detail[256];   ///< path or object of the failed step, NUL-terminated
};

/// Messages on the control socket.
enum xsb_msg_type {
    XSB_MSG_GO = 1,      ///< supervisor → init: ids are mapped: build the sandbox
    XSB_MSG_ERROR,       ///< init → supervisor: step/value(errno)/detail
    XSB_MSG_READY,       ///< init → supervisor: payload exec'd; value = its pid inside
    XSB_MSG_EXIT,        ///< init → supervisor: payload ended; value = wait status
    XSB_MSG_SUSPEND,     ///< supervisor → init: SIGSTOP every other process in the sandbox
    XSB_MSG_RESUME,      ///< supervisor → init: SIGCONT them
    XSB_MSG_SIGNAL,      ///< supervisor → init: send signal `value` to the payload's process group
    XSB_MSG_ACK,         ///< init → supervisor: value = request type acknowledged, value2 = errno
    /// init → supervisor: the filter stopped syscall `value` (or XSB_UNNAMED_VIOLATION); the
    /// init is ending the sandbox.
    XSB_MSG_VIOLATION,
    XSB_MSG_AUDITED,     ///< init → supervisor: audit mode let syscall `value` run (reported once per number)
    XSB_MSG_PREBUILT,    ///< init → supervisor: a pre-built sandbox's shape is built; it waits for LAUNCH
    /// supervisor → init: what is per launch, as a second sealed memfd (the launch part) and the
    /// fds it names, over SCM_RIGHTS (the memfd first). Once per sandbox: it runs one payload, ever.
    XSB_MSG_LAUNCH,
};

struct xsb_msg {
    uint32_t type;
    int32_t step;
    int32_t value;
    int32_t value2;
    char detail[240];
};

/// At most this many fds besides stdio for the payload (3, 4, …).
#define XSB_MAX_EXTRA_FDS 32

/// The supervisor's fds a launch hands to the sandbox init, in the init's order.
struct xsb_passed_fds {
    int count;
    int host[3 + XSB_MAX_EXTRA_FDS + 4 + 1 + XSB_MAX_MOUNT_TREES];
};

/// Writes `cfg` as a launch description (offsets, not pointers: see launch_description.c) into
/// a new sealed memfd (close-on-exec), and lists the fds it refers to. xsb_spawn_start calls it; tests
/// use it to feed the init descriptions. Returns 0, or -1 with errno set.
int xsb_description_create(const struct xsb_spawn_config *cfg, struct xsb_passed_fds *passed, int *fd_out);

/// Writes what is per launch in `cfg` (program path, arguments, environment, working
/// directory, stdio, extra fds, the program's fd) as a launch part into a new sealed memfd
/// (close-on-exec) and lists the fds it refers to, in order. Returns 0, or -1 with errno set.
int xsb_launch_part_create(const struct xsb_spawn_config *cfg, struct xsb_passed_fds *passed, int *fd_out);
/// The largest launch part sent inside the LAUNCH message (prebuilt.c); a larger one goes as
/// a sealed memfd.
#define XSB_LAUNCH_PART_INLINE_MAX (32u << 10)
/// Writes the same launch part into a new buffer (`*blob_out`, `*size_out` bytes; the caller
/// frees it) and lists its fds. Returns 0, or -1 with errno set.
int xsb_launch_part_write(const struct xsb_spawn_config *cfg, struct xsb_passed_fds *passed, char **blob_out, uint64_t *size_out);
/// Writes such a buffer (`size` bytes, freed here) into a new sealed memfd. Returns 0, or -1 with errno set.
int xsb_launch_part_seal(char *blob, uint64_t size, int *fd_out);
/// Checks a launch part as the init does, with `passed_count` fds passed beside it: 0, or -1
/// with `*what` naming what was refused. Maps and releases it (for tests).
int xsb_launch_part_check(int fd, int passed_count, const char **what);
/// The same for a launch part sent inside the LAUNCH message (`size` bytes at `bytes`).
int xsb_launch_part_check_bytes(const void *bytes, uint64_t size, int passed_count, const char **what);
/// Hands a pre-built sandbox (its init reported XSB_MSG_PREBUILT on `control_fd`) what is per
/// launch in `cfg`: the launch part and its fds, in one XSB_MSG_LAUNCH. Then wait for READY
/// (or a failing step) as after xsb_spawn_start. Returns 0, or -1 with `out->failed_step`,
/// `error_number` and `detail` set (then abandon the sandbox: xsb_spawn_abandon).
int xsb_prebuilt_launch(int control_fd, const struct xsb_spawn_config *cfg, struct xsb_spawn_result *out);

/// Starts one sandbox: clones its init, writes its id maps and releases it (GO); the init then
/// builds the sandbox on its own. Must be called from a thread that lives as long as the
/// sandbox (PR_SET_PDEATHSIG is bound to the parent *thread*). Returns 0 with `out->pid`,
/// `pidfd` and `control_fd` set (then wait for the control socket to be readable and call
/// xsb_spawn_poll, from any thread), or -1 with `out->failed_step` set and nothing left running.
int xsb_spawn_start(const struct xsb_spawn_config *cfg, struct xsb_spawn_result *out);
/// Takes, without blocking, what the init started by xsb_spawn_start has reported so far. 1:
/// the payload has exec'd (or a violation came first: `out` says which); 0: nothing decisive
/// yet (audited calls are collected in `out`); -1: a step failed, with `*step`, `*err` and
/// `detail` set (then call xsb_spawn_abandon).
int xsb_spawn_poll(struct xsb_spawn_result *out, int *step, int *err, char *detail, size_t detail_size);
/// Ends a launch that failed or did not finish in time: takes the init's own report of a
/// failing step if it sent one (it may explain ours), kills and reaps the init (and so the
/// sandbox), closes the launch's fds and sets `out->failed_step`, `error_number` and `detail`.
void xsb_spawn_abandon(struct xsb_spawn_result *out, int step, int err, const char *why);

/// The spawner thread (SpawnerThread.swift) behind two calls on each side. The spawner thread
/// has an fd table of its own (spawner_table.c): a clone copies the cloning thread's table, and
/// the host's grows with every sandbox it runs, so the spawner thread keeps only its inbox there
/// and each launch hands it just the fds it passes on.
/// Makes the calling thread's fd table its own, holding only `inbox` (and /dev/null as 0–2).
/// 0 or -errno. Once, when the spawner thread starts.
int xsb_spawner_table_make_private(int inbox);
/// The most fds a launch hands over besides its reply socket: the init, the cgroup directory,
/// stdio, the cgroup v1 tasks files, the extra fds, the program and the detached mounts.
enum { XSB_SPAWNER_MAX_FDS = 2 + 3 + 4 + XSB_MAX_EXTRA_FDS + 1 + XSB_MAX_MOUNT_TREES };
/// Host side: the fds `cfg` names (none of -1), in the order of a hand-over. Count or -errno.
int xsb_spawner_list_fds(const struct xsb_spawn_config *cfg, int out[XSB_SPAWNER_MAX_FDS]);
/// Host side, first call: sends `reply` and `fds` (SCM_RIGHTS) over `outbox`. 0 or -errno.
int xsb_spawner_hand_over(int outbox, const int *fds, int count, int reply);
/// Spawner side, the one call per launch (spawn.c): receives the next hand-over (`expected`
/// fds and the reply socket) from `inbox`, points `cfg`'s fd fields at the copies, drops the
/// thread's supplementary groups when `clear_groups` (a root caller's), starts the sandbox
/// (xsb_spawn_start) and sends its control socket and pidfd back over the reply socket; then
/// closes everything of the launch in the thread's table. Returns 0 with `out->pid` set (the
/// fds come over the reply socket: xsb_spawner_receive_result), or -1 with `out->failed_step`
/// set and nothing left running.
int xsb_spawner_launch(int inbox, int expected, struct xsb_spawn_config *cfg, int clear_groups, struct xsb_spawn_result *out);
/// Host side, second call: receives the started sandbox's control socket and pidfd, setting
/// `out->control_fd` and `out->pidfd`. 0 or -errno.
int xsb_spawner_receive_result(int reply, struct xsb_spawn_result *out);

/// Sends one control message (no fds). Returns 0 or -errno.
int xsb_send_msg(int control_fd, uint32_t type, int32_t value);
/// Receives one control message without blocking. Returns 1 when one was read, 0 when none
/// is pending, -errno on error, -EPIPE on EOF.
int xsb_recv_msg(int control_fd, struct xsb_msg *msg);
/// ``xsb_recv_msg``, also taking the one fd a message may carry (the init's EXIT report passes
/// its mount namespace): `*passed_fd` is it (close-on-exec), or -1. The caller owns it. Any other
/// fd (with another message, not a mount namespace, or more than one) is closed without waiting.
int xsb_recv_msg_with_fd(int control_fd, struct xsb_msg *msg, int *passed_fd);

/// pidfd helpers (raw syscalls; glibc 2.36 has no wrappers for all of them).
/// Sends `sig` to the process behind `pidfd` (signals.c). Returns 0 or -errno.
int xsb_pidfd_send_signal(int pidfd, int sig);
/// Reaps the process behind `pidfd`, waiting for it to end. Returns 0 or -errno.
int xsb_pidfd_wait(int pidfd);
/// Reaps the process behind `pidfd` without blocking. Returns 1 and the raw wait status
/// (as waitpid would report it) when it had ended, 0 when it still runs, -errno on error.
int xsb_pidfd_reap(int pidfd, int *wait_status);

/// Resource numbers as plain integers: glibc declares them as an enum Swift imports as a type of
/// its own (and as macros). The kernel's values, from its header, not copied.
enum {
    XSB_RLIMIT_CPU = RLIMIT_CPU,
    XSB_RLIMIT_FSIZE = RLIMIT_FSIZE,
    XSB_RLIMIT_CORE = RLIMIT_CORE,
    XSB_RLIMIT_NPROC = RLIMIT_NPROC,
    XSB_RLIMIT_NOFILE = RLIMIT_NOFILE,
    XSB_RLIMIT_AS = RLIMIT_AS,
    XSB_RLIMIT_RTPRIO = RLIMIT_RTPRIO,
    XSB_RLIMIT_NICE = RLIMIT_NICE,
};

/// The sandbox init's entry point (the xsb-init executable's main): never returns.
__attribute__((noreturn)) void xsb_init_run(void);

/// Human-readable name of a step, e.g. "bind mount".
const char *xsb_step_name(int step);

#ifdef __cplusplus
}
#endif
#endif
