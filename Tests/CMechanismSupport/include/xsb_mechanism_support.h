// Test support for the C shim's mechanisms, one at a time (Tests/CSandboxShimTests).
//
// Each xsbt_* function below forks the test process, runs one mechanism of the shim in the
// child (which has a known, nearly empty fd table: only the failure channel), and reports what
// the mechanism did as a struct xsbt_outcome: what it returned, the step it reported failing
// (on its status pipe or control socket, both the failure channel here) and what the child saw
// afterwards. After fork only async-signal-safe code runs: raw system calls and plain memory.
// The report is written into memory shared with the parent, so a mechanism may close every fd.
#ifndef XSB_MECHANISM_SUPPORT_H
#define XSB_MECHANISM_SUPPORT_H

// The shim's internal declarations (the mechanisms' functions), to call them directly.
#include "../../../Sources/CSandboxShim/child.h"

#include <stdint.h>
#include <sys/syscall.h>

#ifdef __cplusplus
extern "C" {
#endif

/// System call numbers the seccomp cases name (Swift does not see <sys/syscall.h>'s macros).
enum { XSBT_SYS_EXECVE = SYS_execve, XSBT_SYS_EXECVEAT = SYS_execveat, XSBT_SYS_PTRACE = SYS_ptrace };

/// The child's failure channel (a SOCK_SEQPACKET socket): the mechanisms' status pipe (payload
/// side) and control socket (init side). Nothing else is open in the child when its body starts.
#define XSBT_FAIL_FD 1001
/// A socket the child and the parent take turns on (userns: "unshared", then "mapped").
#define XSBT_SYNC_FD 1002
/// The fds 0 ..< XSBT_FD_SLOTS a snapshot of the child's fd table covers.
#define XSBT_FD_SLOTS 128
/// At most this many sources (memfds at numbers the test chooses) in an fd case.
#define XSBT_MAX_SOURCES 8

/// What an fd of a snapshot is.
enum {
    XSBT_FD_CLOSED = -1,
    XSBT_FD_DEV_NULL = -2,
    XSBT_FD_OTHER = -3,  ///< open, but neither a source nor /dev/null
};

struct xsbt_fd_slot {
    int32_t what;     ///< the index of the source it is, or XSBT_FD_CLOSED, _DEV_NULL, _OTHER
    int32_t cloexec;  ///< 1: close-on-exec
};

/// What one mechanism did in a forked child.
struct xsbt_outcome {
    int32_t returned;      ///< 1: the mechanism returned and the child wrote its report
    int32_t result;        ///< what the mechanism (or the case's body) returned
    int32_t failed_step;   ///< the step it reported failing, or XSB_STEP_NONE
    int32_t failed_errno;  ///< that step's errno
    char failed_detail[240];
    int32_t wait_status;   ///< how the child ended (waitpid)
    int32_t announced;     ///< the payload's last listener announcement on its status pipe, or -1
    int64_t values[16];    ///< the case's own numbers (see each function)
    struct xsbt_fd_slot fds[XSBT_FD_SLOTS];
    char text[4096];       ///< the case's own text (see each function)
};

// MARK: - File descriptors (fds.c)

/// An fd table to start from and what the payload is to receive.
struct xsbt_fd_case {
    /// Sources: memfds opened at these numbers (distinct files, each named by its index).
    int32_t source_fds[XSBT_MAX_SOURCES];
    int32_t source_count;
    /// The index of the source that starts with "#!" (a script), or -1.
    int32_t script_source;
    /// The config's fields, as fd numbers (-1: /dev/null, or none for exec_fd).
    int32_t stdio[3];
    int32_t extra_fds[XSBT_MAX_SOURCES];
    int32_t extra_fd_count;
    int32_t exec_fd;
};
/// xsb_payload_arrange_fds; `result` is its return value, `fds` the table after it.
int xsbt_arrange_payload_fds(const struct xsbt_fd_case *setup, struct xsbt_outcome *out);
/// xsb_init_keep_only with `keep` (`count` numbers), after the sources are open; `fds` after it.
int xsbt_keep_only(const struct xsbt_fd_case *setup, const int32_t *keep, int32_t count, struct xsbt_outcome *out);
/// xsb_place_init_fds with sources 0 and 1 as the control socket and the description, sources
/// 2 ..< count - 1 as the passed fds and the last source as the init; `result` is its return value.
int xsbt_place_init_fds(const struct xsbt_fd_case *setup, struct xsbt_outcome *out);

// MARK: - User namespace (userns.c)

/// The child makes a user namespace of its own; the parent maps it with xsb_userns_map_ids
/// (with `map_twice`, a second time), then the child becomes the mapped ids and hides itself.
/// `text`: uid_map, gid_map and setgroups of the child as the parent read them, then the last
/// map call's detail, each after a line "== NAME". `values`: 0–2 getresuid, 3–5 getresgid,
/// 6 PR_GET_DUMPABLE, in the child; 7 and 8 what the first and the second map call returned.
int xsbt_map_ids(uint32_t uid_inside, uint32_t uid_outside, uint32_t gid_inside, uint32_t gid_outside, int map_twice,
                 struct xsbt_outcome *out);

// MARK: - Resource limits (rlimits.c)

/// xsb_payload_apply_rlimits with `limits`; `values[2i]`, `values[2i+1]`: the soft and hard limit
/// of `limits[i].resource` afterwards (at most 8).
int xsbt_apply_rlimits(const struct xsb_rlimit *limits, int32_t count, struct xsbt_outcome *out);

// MARK: - Capabilities (capabilities.c) and signals (signals.c)

/// The fields of /proc/self/status an outcome's `values` hold, in this order.
enum {
    XSBT_CAP_INH, XSBT_CAP_PRM, XSBT_CAP_EFF, XSBT_CAP_BND, XSBT_CAP_AMB, XSBT_NO_NEW_PRIVS,
    XSBT_SIG_IGN, XSBT_SIG_CGT, XSBT_SIG_BLK, XSBT_SECUREBITS,
    XSBT_STATUS_FIELDS
};
/// What the capability case runs.
enum xsbt_capability_step {
    XSBT_DROP_CAPABILITIES = 1,  ///< xsb_payload_drop_capabilities, then xsb_payload_set_no_new_privs
    XSBT_KEEP_CAPABILITIES,      ///< xsb_keep_capabilities_across_exec (its failure in failed_detail)
};
/// Runs `step` with `cap_last_cap`; `values` hold the child's status fields afterwards.
int xsbt_capabilities(enum xsbt_capability_step step, int32_t cap_last_cap, struct xsbt_outcome *out);

/// What the signal case runs, on a child that ignores SIGPIPE and SIGTERM, catches SIGUSR1 and
/// blocks SIGINT and SIGUSR2.
enum xsbt_signal_step {
    XSBT_NOTHING = 0,             ///< (the starting state)
    XSBT_INIT_RESET,              ///< xsb_init_reset_signals
    XSBT_PAYLOAD_RESET,           ///< xsb_payload_reset_signals
    XSBT_PAYLOAD_RESET_UNBLOCK,   ///< xsb_payload_reset_signals, then xsb_payload_unblock_signals
    XSBT_SUPERVISOR_BLOCK,        ///< xsb_signals_block_all (the supervisor's, across its clone)
    XSBT_SUPERVISOR_BLOCK_RESTORE,  ///< xsb_signals_block_all, then xsb_signals_restore
};
/// `values` hold the child's status fields after `step`.
int xsbt_signals(enum xsbt_signal_step step, struct xsbt_outcome *out);
/// As the init, PID 1 of a PID namespace of its own (the test runs as root): starts a payload
/// (a session leader with a child) and another process, then stops, continues and signals the
/// sandbox (xsb_signals_stop_sandbox, _continue_sandbox, _to_payload, _kill_sandbox) with
/// SIGCHLD read from xsb_signals_child_exits. `text`: one line per step, "STEP RESULT" and the
/// state letters of the processes still there (from the namespace's /proc). `result`: the
/// init's wait status (0: it ran through).
int xsbt_signal_sandbox(struct xsbt_outcome *out);

// MARK: - seccomp, the payload's side (seccomp.c)

/// The payload's last steps before its exec: memory-deny-write-execute, the listener announced,
/// the filter loaded (a one-instruction RET ALLOW filter, or none).
struct xsbt_filter_case {
    int32_t open_below;             ///< fds 0 ..< open_below are open (/dev/null)
    int32_t open_files_limit;       ///< RLIMIT_NOFILE set first, or 0
    int32_t memory_deny_write_execute;
    int32_t no_filter;              ///< bpf_instructions 0
    int32_t expect_elsewhere;       ///< load the filter expecting the listener one fd further
};
/// `values`: 0 PR_GET_MDWE, 1 the listener number announce returned, 2 the number the receiver's
/// pipe got, 3 1 when that fd is a seccomp listener after the load. `announced`: the status record's.
int xsbt_seccomp_payload(const struct xsbt_filter_case *setup, struct xsbt_outcome *out);

// MARK: - Network and host names (network.c), cgroups (cgroups.c)

/// In a user, UTS and network namespace of its own, the child names the host `hostname` and
/// brings the loopback device up. `text`: "NODENAME DOMAINNAME" after; `values`: 0 and 1 the
/// loopback's flags before and after.
int xsbt_name_host(const char *hostname, struct xsbt_outcome *out);
/// The child joins the cgroup whose v1 `tasks` file is `tasks_path` (NULL: none), then, root of a
/// user namespace of its own, enters a cgroup namespace. `text`: /proc/self/cgroup before,
/// after the join and after the namespace, each after a line "==".
int xsbt_join_cgroups(const char *tasks_path, struct xsbt_outcome *out);

// MARK: - File system (mounts.c)

/// In a user, mount and PID namespace of its own (the child maps its own root), the child's
/// child runs xsb_setup_mounts with `cfg` (only the mount fields and controlling_terminal are
/// used) and then looks around its new root: `text` holds one line "CHECK: RESULT" per check
/// (RESULT "ok", the bytes read, or the errno's number), and "/dev: NAME NAME …" (in the
/// directory's order). The checks expect /data (a bind of a directory holding "hello"),
/// /etc/motd, /link, /scratch, /masked and /empty among `cfg`'s operations. `result`: the
/// grandchild's wait status (1: xsb_setup_mounts failed).
int xsbt_setup_mounts(const struct xsb_spawn_config *cfg, struct xsbt_outcome *out);

// MARK: - Control channel (control.c)

/// A sleeping child in a process group of its own is the payload; the init side
/// (xsb_control_serve_request) is sent one XSB_MSG_SIGNAL of `signal`. `values`: 0 the serve
/// result, 1 the ACK's type, 2 its value (the request), 3 its value2 (errno), 4 the payload's wait status.
int xsbt_serve_signal_request(int32_t signal, struct xsbt_outcome *out);

/// Sends one message of `type` on `control_fd` with `fd` attached (SCM_RIGHTS), as the init's
/// EXIT report carries its mount namespace. 0 or -errno.
int xsbt_send_msg_with_fd(int control_fd, uint32_t type, int fd);

// MARK: - Helpers for the tests themselves (in the test process)

/// A memfd (close-on-exec) holding `bytes`, with `seals` added (F_ADD_SEALS). -1 on failure.
int xsbt_memfd(const void *bytes, size_t count, unsigned seals);

#ifdef __cplusplus
}
#endif
#endif
