// The sandbox init: PID 1 of the sandbox's PID namespace, a small static program of its own
// (xsb-init, exec'd by the supervisor's clone child: nothing of the supervisor's memory is in
// it). It reads the launch description, builds the sandbox (ids are mapped by the supervisor
// first), starts the payload, and then stays as a tiny reaper that the supervisor commands
// over the control socket. A pre-built sandbox's init waits, once its shape is built, for the
// launch that brings what is per launch (prebuilt.c). When it exits, the kernel kills every
// other process of the namespace, so "the init is gone" always means "the sandbox is gone".
//
// This file is the init's table of contents: each step is in the file of its mechanism.
#define _GNU_SOURCE
#include <errno.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "child.h"

/// The launch as the supervisor described it (launch_description.c), pointing into the
/// description's mapping.
static struct xsb_spawn_config config;

void xsb_init_run(void) {
    int control_fd = XSB_INIT_CONTROL_FD;
    // Every signal back to its default action: the init inherits the supervisor's ignored
    // signals through exec (SwiftNIO ignores SIGPIPE; a SIGCHLD ignored would reap the payload
    // behind our back). Every signal stays blocked (inherited too): SIGCHLD is read from a
    // signalfd, and the payload unblocks its own right before its exec.
    xsb_init_reset_signals();                                        // signals.c
    // The parent-death signal is bound to the spawner thread, which lives as long as the
    // supervisor. If the parent died before this line, the handshake below reads EOF.
    xsb_init_bind_to_supervisor(control_fd);                         // signals.c
    // What ps shows (exec by fd names the process after the fd's number).
    (void)prctl(PR_SET_NAME, "xsb-init", 0, 0, 0);

    // Read and check the description while the supervisor writes our id maps.
    const char *refused = NULL;
    if (xsb_description_load(XSB_INIT_DESCRIPTION_FD, &config, &refused) != 0)  // launch_description.c
        xsb_init_fail(control_fd, XSB_STEP_LAUNCH_DESCRIPTION, errno, refused);
    close(XSB_INIT_DESCRIPTION_FD);  // the mapping stays
    const struct xsb_spawn_config *cfg = &config;

    if (xsb_control_wait_for(control_fd, XSB_MSG_GO) != 0) _exit(127);  // control.c
    // Nothing of the program runs before the init is in the sandbox's cgroups (children
    // inherit them). "0" moves the writing task itself; the init has a single thread.
    xsb_init_join_cgroups(cfg, control_fd);                          // cgroups.c
    // Become the one id the user namespace maps (a no-op for an unprivileged caller): a root
    // caller's init is still host uid 0, which maps to nothing here and must never create a
    // file. Raw calls, as everywhere the receiver thread (which the C runtime does not know) may run.
    // Capabilities stay (uid 0 of this namespace is unmapped, so no root-to-user transition).
    xsb_init_become_mapped_ids(cfg, control_fd);                     // userns.c
    // A change of the effective ids (a root caller's: host uid 0 to 65534) clears the
    // parent-death signal: set it again. (Had the supervisor died in between, the control
    // socket's hang-up ends the sandbox in xsb_init_serve.)
    xsb_init_bind_to_supervisor(control_fd);                         // signals.c
    // Non-dumpable before anything of the sandbox runs: the program inside cannot read the
    // init's memory or take its fds (the control socket, the listener) through /proc. Not
    // before GO: the supervisor writes our /proc/PID/uid_map, which non-dumpable would make
    // root's; not before setresuid, which resets the flag to fs.suid_dumpable when the uid changes.
    xsb_init_hide_from_sandbox(control_fd);                          // userns.c
    xsb_init_name_host(cfg, control_fd);                             // network.c
    xsb_init_bring_up_loopback(control_fd);                          // network.c
    if (xsb_setup_mounts(cfg, control_fd) != 0) _exit(127);          // mounts.c
    // The cgroup namespace is rooted in the sandbox's cgroup, which the init joined above.
    // Kernels without cgroup namespaces say EINVAL: that one step is optional by design.
    xsb_init_enter_cgroup_namespace(control_fd);                     // cgroups.c
    int listener = -1;
    pid_t payload;
    struct xsb_receiver_pipes pipes;
    if (cfg->prebuilt && cfg->waiting_payload) {
        // A pre-built sandbox whose payload waits: started now, every step of it that depends
        // only on the shape done (the filter loaded), it needs only its fds, working directory
        // and exec when the launch comes.
        control_fd = xsb_waiting_payload_start(&config, control_fd, &pipes);  // waiting_payload.c
        int waiting[XSB_WAITING_PAYLOAD_MAX_FDS];
        size_t count = xsb_waiting_payload_fds(&pipes, waiting);              // waiting_payload.c
        xsb_init_await_launch(&config, control_fd, waiting, count);           // prebuilt.c
        payload = xsb_waiting_payload_go(cfg, control_fd, &listener);          // waiting_payload.c
    } else {
        // A pre-built sandbox stops here, its shape built, until a launch hands it what is per
        // launch (the program, its arguments, environment, working directory and fds); from
        // then on it goes on as a cold launch does. It runs one payload, ever.
        if (cfg->prebuilt) xsb_init_await_launch(&config, control_fd, NULL, 0);  // prebuilt.c

        // The payload shares our fd table until exec and places its fds at 0, 1, 2, 3…: keep
        // the control socket far above them.
        control_fd = xsb_init_lift_control_socket(cfg, control_fd);      // fds.c
        // Before the payload starts, keep only the control socket and the fds the payload will
        // receive (the cgroup `tasks` files are done with), so nothing else can reach it and
        // none counts against its limits.
        xsb_init_keep_only_sources(cfg, control_fd);                     // fds.c

        // The receiver thread: it must be reading the payload's listener before the payload's
        // execve, which the filter may hand to it. The last thing created before the payload:
        // the init's own cgroup moves and namespace changes above need a single thread.
        xsb_receiver_launch(cfg, control_fd, &pipes);                    // receiver.c
        payload = xsb_payload_start(cfg, control_fd, pipes.announce[1], &listener);  // payload.c
    }
    // The init must not hold the caller's stdio (or the payload's copies of it) or anything
    // else for the lifetime of the sandbox: only the control socket, the receiver's pipes and
    // the listener stay. Nothing else may stay open: fail closed.
    int keep[5] = {control_fd, pipes.announce[0], pipes.finished[0], pipes.finished[1], listener};
    xsb_init_keep_only(control_fd, keep, 5);                         // fds.c
    xsb_description_unload();                                        // launch_description.c
    xsb_control_send(control_fd, XSB_MSG_READY, payload, 0);         // control.c
    xsb_init_serve(control_fd, payload, pipes.finished[0], listener);  // reaper.c
}
