// cgroups, on the C side: joining them, and only that. Sources/SandboxRuntime/Cgroups.swift owns
// a sandbox cgroup's life (its name, creation with the policy's limits, the fds handed to the
// launch, removal, the sweep); spawner_table.c and launch_description.c only carry those fds
// here. cgroup v2: clone3 starts the init in the sandbox's cgroup (CLONE_INTO_CGROUP), so
// nothing is ever migrated. cgroup v1: the init moves itself into each of its cgroups before
// anything of the program runs. Then the init roots a cgroup namespace there.
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include "child.h"

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

// MARK: - Supervisor side

void xsb_cgroup_clone_into(const struct xsb_spawn_config *cfg, struct xsb_clone_args *args) {
    if (cfg->cgroup_directory_fd >= 0) {
        args->flags |= CLONE_INTO_CGROUP;
        args->cgroup = (uint64_t)cfg->cgroup_directory_fd;
    }
}

// MARK: - Init side

void xsb_init_join_cgroups(const struct xsb_spawn_config *cfg, int control_fd) {
    for (int i = 0; i < 4; i++) {
        int fd = cfg->cgroup_tasks_fds[i];
        if (fd >= 0 && write(fd, "0", 1) != 1) xsb_init_fail(control_fd, XSB_STEP_CGROUP_ATTACH, errno, "tasks");
    }
}

void xsb_init_enter_cgroup_namespace(int control_fd) {
    if (unshare(CLONE_NEWCGROUP) != 0 && errno != EINVAL) xsb_init_fail(control_fd, XSB_STEP_CGROUP_NAMESPACE, errno, "unshare");
}
