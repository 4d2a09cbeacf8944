// Resource limits: the policy's rlimits (planned in Sources/SandboxRuntime/ResourceLimitPlan.swift),
// set by the payload right before its exec, after its fds are in place.
#define _GNU_SOURCE
#include <sys/resource.h>

#include "child.h"

void xsb_payload_apply_rlimits(const struct xsb_spawn_config *cfg, int status_fd) {
    for (size_t i = 0; i < cfg->rlimit_count; i++) {
        struct rlimit limit = {.rlim_cur = cfg->rlimits[i].soft, .rlim_max = cfg->rlimits[i].hard};
        if (setrlimit((__rlimit_resource_t)cfg->rlimits[i].resource, &limit) != 0) {
            char name[16] = "resource ";
            name[9] = (char)('0' + (cfg->rlimits[i].resource / 10) % 10);
            name[10] = (char)('0' + cfg->rlimits[i].resource % 10);
            xsb_payload_fail(status_fd, XSB_STEP_RLIMIT, name);
        }
    }
}
