// rlimits.c's case: the policy's limits, as the payload sets them.
#define _GNU_SOURCE
#include <sys/resource.h>

#include "forked_child.h"

struct rlimit_context {
    const struct xsb_rlimit *limits;
    int32_t count;
};

static int rlimit_body(const void *context, struct xsbt_outcome *out) {
    const struct rlimit_context *c = context;
    struct xsb_spawn_config cfg = {0};
    cfg.rlimits = c->limits;
    cfg.rlimit_count = (size_t)c->count;
    xsb_payload_apply_rlimits(&cfg, XSBT_FAIL_FD);
    for (int i = 0; i < c->count && i < 8; i++) {
        struct rlimit now;
        if (getrlimit((__rlimit_resource_t)c->limits[i].resource, &now) != 0) return -1;
        out->values[2 * i] = (int64_t)now.rlim_cur;
        out->values[2 * i + 1] = (int64_t)now.rlim_max;
    }
    return 0;
}

int xsbt_apply_rlimits(const struct xsb_rlimit *limits, int32_t count, struct xsbt_outcome *out) {
    struct rlimit_context context = {limits, count};
    return xsbt_run_forked(rlimit_body, NULL, &context, out);
}
