// capabilities.c's cases: everything dropped in the payload; everything kept across the clone
// child's exec of the init.
#define _GNU_SOURCE
#include <sched.h>
#include <sys/prctl.h>

#include "forked_child.h"

struct capability_context {
    enum xsbt_capability_step step;
    int32_t cap_last_cap;
};

static int capability_body(const void *context, struct xsbt_outcome *out) {
    const struct capability_context *c = context;
    int result = 0;
    if (c->step == XSBT_DROP_CAPABILITIES) {
        struct xsb_spawn_config cfg = {0};
        cfg.cap_last_cap = c->cap_last_cap;
        xsb_payload_drop_capabilities(&cfg, XSBT_FAIL_FD);
        xsb_payload_set_no_new_privs(XSBT_FAIL_FD);
    } else {
        // The clone child is root of a new user namespace, with every capability in it.
        if (unshare(CLONE_NEWUSER) != 0) return -2;
        const char *failed = xsb_keep_capabilities_across_exec(c->cap_last_cap);
        if (failed != NULL) {
            xsb_copy_string(out->failed_detail, sizeof out->failed_detail, failed);
            result = -1;
        }
    }
    xsbt_status_fields(out);
    out->values[XSBT_SECUREBITS] = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    return result;
}

int xsbt_capabilities(enum xsbt_capability_step step, int32_t cap_last_cap, struct xsbt_outcome *out) {
    struct capability_context context = {step, cap_last_cap};
    return xsbt_run_forked(capability_body, NULL, &context, out);
}
