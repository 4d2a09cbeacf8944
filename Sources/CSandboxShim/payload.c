// The payload: started by the sandbox init (xsb_payload_start), and its last steps before exec
// (xsb_payload_main), in the order that matters: session, signals, fds, rlimits, capabilities,
// working directory, no_new_privs, memory-deny-write-execute, seccomp (last), execve. Each
// step is in the file of its mechanism; this file is their order.
//
// It runs in a vfork child of the sandbox init that shares the init's fd table, so it never
// closes an fd (that would close the init's too): it marks them close-on-exec instead.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

// MARK: - Init side

pid_t xsb_payload_start(const struct xsb_spawn_config *cfg, int control_fd, int announce_fd, int *listener) {
    int status_pipe[2];
    if (pipe2(status_pipe, O_CLOEXEC | O_NONBLOCK) != 0) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "pipe2");
    for (int i = 0; i < 2; i++) status_pipe[i] = xsb_init_move_high(cfg, control_fd, status_pipe[i], "status pipe");

    long child = syscall(SYS_clone, CLONE_VFORK | CLONE_FILES | SIGCHLD, 0, NULL, NULL, 0);
    if (child == 0) xsb_payload_main(cfg, announce_fd, status_pipe[1]);
    if (child < 0) xsb_init_fail(control_fd, XSB_STEP_SPAWN_PAYLOAD, errno, "clone");
    xsb_receiver_exec_done();

    // Back here the payload has exec'd or exited: its records say which, and where its
    // listener is.
    *listener = -1;
    struct xsb_payload_status record;
    while (read(status_pipe[0], &record, sizeof record) == (ssize_t)sizeof record) {
        if (record.step == XSB_STEP_NONE) {
            *listener = record.value;
            continue;
        }
        record.detail[sizeof record.detail - 1] = '\0';
        xsb_init_fail(control_fd, record.step, record.value, record.detail);
    }
    close(status_pipe[0]);
    close(status_pipe[1]);
    // No error record: it exec'd (or a signal ended it first, which the reaper reports as its exit).
    return (pid_t)child;
}

// MARK: - Payload side

void xsb_payload_record(int status_fd, int step, int value, const char *detail) {
    struct xsb_payload_status s;
    char *p = (char *)&s;
    for (size_t i = 0; i < sizeof s; i++) p[i] = 0;
    s.step = step;
    s.value = value;
    xsb_copy_string(s.detail, sizeof s.detail, detail);
    (void)write(status_fd, &s, sizeof s);
}

void xsb_payload_fail(int status_fd, int step, const char *detail) {
    xsb_payload_record(status_fd, step, errno, detail);
    _exit(127);
}

void xsb_payload_main(const struct xsb_spawn_config *cfg, int announce_fd, int status_fd) {
    // The init put the status pipe above every target fd (XSB_FD_FLOOR + extra fds).
    // A new session: no controlling terminal, so nothing inside can push keystrokes (TIOCSTI)
    // into the caller's terminal or receive its job-control signals.
    if (setsid() < 0) xsb_payload_fail(status_fd, XSB_STEP_SESSION, "setsid");
    xsb_payload_reset_signals(status_fd);                            // signals.c
    int program = xsb_payload_arrange_fds(cfg, status_fd);           // fds.c
    // The caller's relay pseudo-terminal as the session's controlling terminal: the terminal's
    // Ctrl-C, Ctrl-\ and window size changes then reach the program's foreground process group,
    // and a shell inside gets job control. The caller's own terminal never gets here.
    xsb_payload_take_controlling_terminal(cfg, status_fd);           // fds.c
    xsb_payload_apply_rlimits(cfg, status_fd);                       // rlimits.c
    xsb_payload_drop_capabilities(cfg, status_fd);                   // capabilities.c
    // With the program's own rights: a directory only the capabilities dropped above could
    // enter is refused, as it is for a waiting payload (waiting_payload.c).
    if (chdir(cfg->cwd) != 0) xsb_payload_fail(status_fd, XSB_STEP_WORKING_DIRECTORY, cfg->cwd);
    // Checked now, with the sandbox's own rights, so the common exec failures are reported
    // precisely before the filter is in place. (A program given as an fd is the supervisor's
    // own sealed copy, executable by everyone.)
    if (program < 0 && access(cfg->path, X_OK) != 0) xsb_payload_fail(status_fd, XSB_STEP_EXEC, cfg->path);
    xsb_payload_set_no_new_privs(status_fd);                         // capabilities.c
    xsb_payload_deny_write_execute(cfg, status_fd);                  // seccomp.c
    int listener = xsb_payload_announce_listener(cfg, status_fd, announce_fd);  // seccomp.c
    xsb_payload_unblock_signals(status_fd);                          // signals.c
    xsb_payload_load_filter(cfg, status_fd, listener);               // seccomp.c

    // From here on the policy's filter applies: it must allow execve (execveat for a program
    // given as an fd), write and exit_group.
    if (program >= 0) syscall(SYS_execveat, program, "", cfg->argv, cfg->envp, AT_EMPTY_PATH);
    else execve(cfg->path, cfg->argv, cfg->envp);
    xsb_payload_fail(status_fd, XSB_STEP_EXEC, cfg->path);
}
