// Internal to the shim: what the clone child (sandbox init and payload) shares, by mechanism
// (one file each, its supervisor side and its sandbox side together). spawn.c, init.c and
// payload.c are the tables of contents that call them in order.
// Everything declared here that runs between clone and exec is async-signal-safe: raw system
// calls and plain memory only.
//
// Naming: xsb_init_* runs in the sandbox init and reports a failing step on the control socket
// and exits (xsb_init_fail); xsb_payload_* runs in the payload and reports a failing step on its
// status pipe and exits (xsb_payload_fail); the rest return their failure.
#ifndef XSB_CHILD_H
#define XSB_CHILD_H

#include <signal.h>

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
#define XSB_LAUNCH_FORMAT_VERSION 7

/// Init side: maps the description behind `fd`, checks every offset, length, count and value,
/// and fills `cfg` with pointers into it. Returns 0, or -1 with errno set and `*what` naming
/// what was refused.
int xsb_description_load(int fd, struct xsb_spawn_config *cfg, const char **what);
/// Init side: a pre-built sandbox's launch part (the memfd `fd`, with `passed` fds received
/// beside it, in order): checks it like the description and sets `cfg`'s per-launch fields
/// (path, argv, envp, cwd, stdio, extra fds, exec_fd) from it. Returns 0, or -1 with errno set
/// and `*what` naming what was refused.
int xsb_launch_part_load(int fd, const int *passed, int passed_count, struct xsb_spawn_config *cfg, const char **what);
/// Init side: the same for a launch part that came inside the LAUNCH message (`size` bytes at
/// `base`, 8-byte aligned, which stay where they are while the launch runs).
int xsb_launch_part_load_bytes(const char *base, uint64_t size, const int *passed, int passed_count, struct xsb_spawn_config *cfg,
                               const char **what);
/// Init side: the launch part at `base` (page-aligned) came inside the LAUNCH message: its
/// pages are given back by xsb_description_unload.
void xsb_launch_part_received(const char *base, uint64_t size);
/// Init side: releases what xsb_description_load mapped, once the payload runs (its memory is
/// charged to the supervisor, not to the sandbox).
void xsb_description_unload(void);

/// Copies at most `size - 1` bytes and always terminates (no libc string functions that may allocate).
void xsb_copy_string(char *dst, size_t size, const char *src);
size_t xsb_string_length(const char *s);
/// Writes `prefix` followed by `suffix` into `dst`; returns -1 when it does not fit.
int xsb_join_path(char *dst, size_t size, const char *prefix, const char *suffix);

/// Builds the sandbox's file system and pivots into it (runs in the init, as root of its
/// user namespace). Returns 0, or -1 after reporting the failing step on `control_fd`.
int xsb_setup_mounts(const struct xsb_spawn_config *cfg, int control_fd);

/// Record the payload writes on the status pipe: first its listener's number (step
/// XSB_STEP_NONE, value = fd), then, if a step fails, that step.
struct xsb_payload_status {
    int32_t step;
    int32_t value;  ///< errno, or the listener's fd number
    char detail[128];
};

// MARK: - Process creation (spawn.c: the supervisor's side; clone3 on a stack of its own)

/// struct clone_args from linux/sched.h, spelled out to avoid header clashes with <sched.h>.
struct xsb_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    uint64_t set_tid, set_tid_size, cgroup;
};

// MARK: - Control channel (control.c)

/// Supervisor side, after GO, when the control socket is readable: takes what the init has
/// reported so far, without blocking. 1: the launch succeeded (READY, or a violation came
/// first: `out` says which; audited calls are collected in `out`); 0: nothing decisive yet;
/// -1: it failed, with `*step`, `*err` and `detail` set.
int xsb_control_poll_launch(int control_fd, struct xsb_spawn_result *out, int *step, int *err, char *detail, size_t detail_size);
/// Supervisor side: if the init has reported a failing step, it replaces `*step`, `*err` and
/// `detail` (the init's failure may have made ours).
void xsb_control_take_init_report(int control_fd, int *step, int *err, char *detail, size_t detail_size);
/// Sends an XSB_MSG_ERROR for `step` with `err` and `detail` on the control socket.
void xsb_child_report(int control_fd, int step, int err, const char *detail);
/// Init side: reports the failing step on the control socket and exits.
__attribute__((noreturn)) void xsb_init_fail(int control_fd, int step, int err, const char *detail);
/// Init side: sends one message (failure ignored: the supervisor may be gone).
void xsb_control_send(int control_fd, uint32_t type, int32_t value, int32_t value2);
/// Init side: reports the payload's end (its wait status), passing the init's mount namespace
/// with it when it can (failure ignored).
void xsb_control_send_exit(int control_fd, int32_t status);
/// Init side: waits for one message of `type` from the supervisor; EOF (the supervisor died)
/// or anything else fails (-1).
int xsb_control_wait_for(int control_fd, uint32_t type);
/// Init side: reads one request of the supervisor's and carries it out (suspend, resume,
/// signal), acknowledging it. Returns 0, or -1 when the supervisor is gone (EOF).
int xsb_control_serve_request(int control_fd, pid_t payload);

// MARK: - Pre-built sandboxes (prebuilt.c)

/// Init side, in a pre-built sandbox once its shape is built: keeps only the control socket
/// (and the `also_count` fds of `also_keep`: a waiting payload's), reports XSB_MSG_PREBUILT and
/// waits for XSB_MSG_LAUNCH, whose launch part it checks and loads into `cfg`. A malformed
/// launch fails at the step "launch description"; the supervisor closing the socket instead
/// (the pool drained) ends the sandbox quietly.
void xsb_init_await_launch(struct xsb_spawn_config *cfg, int control_fd, const int *also_keep, size_t also_count);

// MARK: - A pre-built sandbox's waiting payload (waiting_payload.c)

struct xsb_receiver_pipes;

/// The most fds xsb_waiting_payload_fds lists.
#define XSB_WAITING_PAYLOAD_MAX_FDS 9
/// Init side, in a pre-built sandbox whose description asks for it, once its shape is built:
/// keeps only the control socket and lifts it above the payload's fds, starts the receiver
/// thread (`pipes`) and then the payload, which does every step that depends only on the
/// shape, loads its filter and waits; returns once it waits (the control socket's new number).
int xsb_waiting_payload_start(struct xsb_spawn_config *cfg, int control_fd, struct xsb_receiver_pipes *pipes);
/// Init side: the fds the waiting payload and the receiver need until the launch (into `fds`,
/// at most XSB_WAITING_PAYLOAD_MAX_FDS). Returns how many.
size_t xsb_waiting_payload_fds(const struct xsb_receiver_pipes *pipes, int *fds);
/// Init side, while the pre-built sandbox is idle: returns once the control socket is readable
/// (the launch, or the supervisor letting go); a waiting payload ended meanwhile (killed from
/// outside) ends the sandbox, which the supervisor then replaces.
void xsb_waiting_payload_idle(int control_fd);
/// Init side, with the launch loaded into `cfg`: places the payload's fds, lets it go and waits
/// until it has exec'd or failed (a failure fails the launch at its step). Returns its pid;
/// `*listener` is its filter's listener.
pid_t xsb_waiting_payload_go(const struct xsb_spawn_config *cfg, int control_fd, int *listener);

// MARK: - Lifetime and exit (reaper.c; the pidfd helpers are in xsb_shim.h)

/// Init side: serves the supervisor until the payload has ended. Then the sandbox ends: what
/// the payload left is killed, and once the receiver thread has seen the last user of the
/// filter go (so that a call it stopped in those last moments is still reported), the exit is
/// reported and the init exits, which ends the PID namespace.
__attribute__((noreturn)) void xsb_init_serve(int control_fd, pid_t payload, int finished_fd, int listener);

// MARK: - Signals (signals.c: every signal mechanism, both sides; xsb_pidfd_send_signal is in xsb_shim.h)

/// Supervisor side: blocks every signal in the calling thread across the clone (no Swift or
/// NIO handler may run in a child that shares our memory), keeping the old mask in `saved`.
void xsb_signals_block_all(sigset_t *saved);
/// Supervisor side: puts back the mask xsb_signals_block_all saved.
void xsb_signals_restore(const sigset_t *saved);

/// Init side: every signal back to its default action, and every signal blocked.
void xsb_init_reset_signals(void);
/// Init side: the parent-death signal (SIGKILL when the supervisor's spawner thread ends).
void xsb_init_bind_to_supervisor(int control_fd);
/// Init side: a signalfd (non-blocking, close-on-exec) that becomes readable when a child of
/// the init changes state (SIGCHLD stays blocked and queues for it). -1 with errno.
int xsb_signals_child_exits(void);
/// Init side: reads every queued signal of the signalfd `signal_fd`.
void xsb_signals_drain(int signal_fd);
/// Init side, any thread (raw system call): SIGKILL to every other process of the PID namespace.
void xsb_signals_kill_sandbox(void);
/// Init side: SIGSTOP to every other process of the namespace, verified (each task seen
/// stopped, or waiting uninterruptibly with its stop pending). Returns 0, EAGAIN when the
/// sandbox would not stop, or another errno.
int xsb_signals_stop_sandbox(void);
/// Init side: SIGCONT to every other process of the namespace. Returns 0 or an errno.
int xsb_signals_continue_sandbox(void);
/// Init side: `sig` to the process group of the payload `payload` (it leads its own session).
/// A number that is not a signal (≤ 0 or ≥ 65) sends nothing. Returns 0 or an errno.
int xsb_signals_to_payload(pid_t payload, int sig);
/// Init side: the handler of SIGUSR1, the receiver thread's wake-up (no SA_RESTART, so a
/// blocked call returns EINTR). 0, or -1 with errno.
int xsb_signals_install_wake(void);
/// Init's receiver thread (raw system call): unblocks SIGUSR1 in the calling thread only.
void xsb_signals_accept_wake(void);
/// Init side: SIGUSR1 to the thread `tid` of this process (nothing when `tid` ≤ 0).
void xsb_signals_wake(pid_t tid);

/// Payload side: every signal back to its default action (ignored ones stay ignored across exec).
void xsb_payload_reset_signals(int status_fd);
/// Payload side: unblocks every signal, right before the filter and the exec.
void xsb_payload_unblock_signals(int status_fd);

// MARK: - The spawner thread's fd table (spawner_table.c; the host side is in xsb_shim.h)

/// What xsb_spawner_take_over received (the spawner thread's copies).
struct xsb_spawner_fds {
    int received[XSB_SPAWNER_MAX_FDS];
    int count;
    int extra[XSB_MAX_EXTRA_FDS];    ///< xsb_spawner_apply's storage for cfg->extra_fds
    int trees[XSB_MAX_MOUNT_TREES];  ///< and for cfg->mount_trees
    int reply;  ///< the launch's own socket for xsb_spawner_send_result
};
/// Spawner side: receives the next hand-over (`expected` fds and the reply socket) from
/// `inbox`. 0 or -errno (-EPROTO: another number of fds came: fail closed).
int xsb_spawner_take_over(int inbox, int expected, struct xsb_spawner_fds *storage);
/// Spawner side: points `cfg`'s fd fields (its extra fds into `storage`) at the copies
/// received, in the order xsb_spawner_list_fds gave them. 0 or -errno.
int xsb_spawner_apply(struct xsb_spawn_config *cfg, struct xsb_spawner_fds *storage);
/// Spawner side: sends a started sandbox's control socket and pidfd over `reply`. 0 or -errno.
int xsb_spawner_send_result(int reply, const struct xsb_spawn_result *out);
/// Spawner side: closes every fd above 2 of the calling thread's table except `inbox` (after
/// each launch).
void xsb_spawner_table_clear(int inbox);

/// The kernel's struct sigaction (x86_64 and aarch64 alike), for calls made past the C
/// runtime's `sigaction` (signals.c, and the init's own runtime).
struct xsb_kernel_sigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

/// A system call without the C runtime, for the init's receiver thread (a thread the runtime
/// does not know, sharing the init's errno) and what it calls, and for the init's own C runtime
/// (Sources/xsb-init/runtime), which needs all six arguments. Returns the result or -errno.
static inline long xsb_inline_syscall6(long nr, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
#else
#error "xsb_inline_syscall6 needs an inline system call for this architecture"
#endif
}

/// xsb_inline_syscall6 with up to five arguments: the sixth is 0 (a filter sees it, so never garbage).
static inline long xsb_raw_syscall(long nr, long a, long b, long c, long d, long e) {
    return xsb_inline_syscall6(nr, a, b, c, d, e, 0);
}

// MARK: - User namespace (userns.c)

/// Supervisor side: writes setgroups=deny first (an unprivileged writer may not map gids
/// otherwise, and it keeps the sandbox from dropping supplementary groups to get around "deny"
/// permissions), then the one-id uid and gid maps of process `pid`. Returns 0 or -errno with
/// the file in `detail`.
int xsb_userns_map_ids(pid_t pid, const struct xsb_spawn_config *cfg, char *detail, size_t size);
/// Supervisor side: drops the calling thread's supplementary groups (only that thread's: a raw
/// setgroups). The spawner thread of a root supervisor does this so that sandboxes, which
/// cannot drop groups themselves (setgroups is denied in them), do not carry root's groups.
/// Returns 0 or an errno.
int xsb_clear_thread_groups(void);
/// Init side: becomes the one id the user namespace maps (setresgid, setresuid, raw calls).
void xsb_init_become_mapped_ids(const struct xsb_spawn_config *cfg, int control_fd);
/// Init side: non-dumpable, so nothing in the sandbox reads the init's memory or fds via /proc.
void xsb_init_hide_from_sandbox(int control_fd);

// MARK: - cgroups (cgroups.c)

/// Supervisor side: cgroup v2: the clone starts the init in the sandbox's cgroup directory.
void xsb_cgroup_clone_into(const struct xsb_spawn_config *cfg, struct xsb_clone_args *args);
/// Init side: cgroup v1: moves the init into each of the sandbox's cgroups ("0" to `tasks`).
void xsb_init_join_cgroups(const struct xsb_spawn_config *cfg, int control_fd);
/// Init side: a cgroup namespace rooted in the init's cgroup (EINVAL, no support: skipped).
void xsb_init_enter_cgroup_namespace(int control_fd);

// MARK: - Network and host names (network.c)

/// Init side: the UTS namespace's hostname (the policy's) and domain name ("none").
void xsb_init_name_host(const struct xsb_spawn_config *cfg, int control_fd);
/// Init side: brings the network namespace's loopback device up.
void xsb_init_bring_up_loopback(int control_fd);

// MARK: - File descriptors (fds.c)

/// Clone child: puts the control socket at 0, the description at 1, the passed fds from 2 on and
/// the init executable (close-on-exec) right after them, and closes every other fd. Returns
/// the init executable's fd, or -1 with errno set and `*failed` naming what failed.
int xsb_place_init_fds(int control_fd, int description_fd, const struct xsb_passed_fds *passed, int init_fd, const char **failed);
/// Init side: moves `fd` (close-on-exec) out of the way of the payload's dup2 onto 0, 1, 2, 3….
int xsb_init_move_high(const struct xsb_spawn_config *cfg, int control_fd, int fd, const char *what);
/// Init side: the control socket, moved far above the payload's fds. Returns its new number.
int xsb_init_lift_control_socket(const struct xsb_spawn_config *cfg, int control_fd);
/// Init side: closes every fd except the `count` in `keep` (unsorted; negative ones ignored).
void xsb_init_keep_only(int control_fd, int *keep, size_t count);
/// Init side: keeps only the control socket and the fds the payload will receive (the program's too).
void xsb_init_keep_only_sources(const struct xsb_spawn_config *cfg, int control_fd);
/// Payload side: places the caller's chosen fds at 0, 1, 2, 3…; everything else becomes
/// close-on-exec. Sources first move above every target so that no dup2 overwrites a later source.
/// Returns the fd to exec the program by (a script's at 3 + extra fd count, kept across the
/// exec), or -1 when the program is exec'd by path.
int xsb_payload_arrange_fds(const struct xsb_spawn_config *cfg, int status_fd);
/// Init side: the same placement for a waiting payload (waiting_payload.c), which shares the
/// init's fd table; a failure is the init's (xsb_init_fail).
int xsb_init_place_payload_fds(const struct xsb_spawn_config *cfg, int control_fd);
/// Payload side: when asked, the first of fds 0–2 that is a terminal becomes the controlling one.
void xsb_payload_take_controlling_terminal(const struct xsb_spawn_config *cfg, int status_fd);

// MARK: - Resource limits (rlimits.c) and capabilities (capabilities.c)

/// Payload side: sets the policy's rlimits.
void xsb_payload_apply_rlimits(const struct xsb_spawn_config *cfg, int status_fd);
/// Clone child: keeps every capability across the exec of the init (inheritable, ambient).
/// Returns NULL, or what failed (errno set).
const char *xsb_keep_capabilities_across_exec(int cap_last_cap);
/// Payload side: locks the securebits and empties every capability set.
void xsb_payload_drop_capabilities(const struct xsb_spawn_config *cfg, int status_fd);
/// Payload side: PR_SET_NO_NEW_PRIVS.
void xsb_payload_set_no_new_privs(int status_fd);

// MARK: - seccomp (seccomp.c; the init's receiver thread: receiver.c)

/// Payload side: memory-deny-write-execute (PR_SET_MDWE), when the launch asks for it.
void xsb_payload_deny_write_execute(const struct xsb_spawn_config *cfg, int status_fd);
/// Payload side: checks the filter, and announces the listener's fd number-to-be on the status
/// pipe (to the init) and on `announce_fd` (to the receiver; -1: not here). Returns that number.
int xsb_payload_announce_listener(const struct xsb_spawn_config *cfg, int status_fd, int announce_fd);
/// Payload side: loads the filter with a notification listener, which must get `expected_listener`.
void xsb_payload_load_filter(const struct xsb_spawn_config *cfg, int status_fd, int expected_listener);

/// What the receiver does with a notified call.
enum xsb_notification_verdict {
    XSB_VERDICT_LET_FIRST_EXEC_RUN = 1,  ///< the launch's own execve ("no exec after start"): continue
    XSB_VERDICT_LET_RUN_AUDITED,         ///< audit mode: continue, and report the number (once)
    XSB_VERDICT_IGNORE,                  ///< audit mode, a withdrawn call: it runs when made again
    XSB_VERDICT_FAIL_LAUNCH_EXEC,        ///< the launch's own execve, which the policy forbids: end, fail the launch
    XSB_VERDICT_END_SANDBOX,             ///< a call the policy kills: end the sandbox, report the violation
};
/// What a decision depends on: the launch's settings and where the launch is.
struct xsb_notification_state {
    int audit;
    int supervise_first_exec;
    int first_exec_done;  ///< the launch's own execve was let run
    int exec_done;        ///< the payload's vfork has returned (it exec'd or failed)
};
/// The one place a notified call is decided: syscall `nr` (or, with `withdrawn`, a call a signal
/// withdrew before it was read). Plain memory only (the receiver thread calls it).
enum xsb_notification_verdict xsb_seccomp_decide(int nr, int withdrawn, const struct xsb_notification_state *state);

// MARK: - The payload (payload.c) and the receiver thread (receiver.c)

/// Init side: starts the payload and waits (vfork) until it has exec'd or failed. The payload
/// shares our fd table (CLONE_FILES), so the seccomp listener it creates right before exec
/// appears here, where the receiver thread reads it, while exec leaves the payload a table of
/// its own. Returns the payload's pid; `*listener` is the listener's fd number (-1: none announced).
pid_t xsb_payload_start(const struct xsb_spawn_config *cfg, int control_fd, int announce_fd, int *listener);
/// The payload, in a vfork child sharing the init's fd table: never returns.
/// Announces its listener's fd number on `announce_fd` (to the receiver thread) and
/// `status_fd` (to the init) before loading the filter, and reports a failure on `status_fd`
/// (a pipe the init reads when the vfork returns).
__attribute__((noreturn)) void xsb_payload_main(const struct xsb_spawn_config *cfg, int announce_fd, int status_fd);
/// Payload side: writes one record on the status pipe.
void xsb_payload_record(int status_fd, int step, int value, const char *detail);
/// Payload side: records the failing step (with errno) and exits.
__attribute__((noreturn)) void xsb_payload_fail(int status_fd, int step, const char *detail);

/// The receiver's pipes: the payload writes its listener's number on announce[1], the
/// receiver writes one byte on finished[1] once no task can use the filter any more.
struct xsb_receiver_pipes {
    int announce[2];
    int finished[2];
};
/// Init side: creates the receiver's pipes (above the payload's fds) and starts the init's
/// notification receiver thread, which reads the listener number, answers the filter's
/// notifications (ending the sandbox on a kill) and signals `finished` at the end.
void xsb_receiver_launch(const struct xsb_spawn_config *cfg, int control_fd, struct xsb_receiver_pipes *pipes);
/// Tells the receiver the payload's vfork has returned (it exec'd or failed).
void xsb_receiver_exec_done(void);
/// Interrupts the receiver's blocked RECV, so that it notices the filter has no user left.
/// Before Linux 6.11 RECV does not return by itself then. Called from the init's main thread.
void xsb_receiver_wake(void);

#endif
