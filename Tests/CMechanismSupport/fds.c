// fds.c's cases: the payload's fds at 0, 1, 2, 3…, the init's keep-only, the clone child's placement.
#define _GNU_SOURCE
#include <errno.h>

#include "forked_child.h"

/// The config the case describes.
static void fd_config(const struct xsbt_fd_case *setup, struct xsb_spawn_config *cfg, int *extra) {
    for (int i = 0; i < 3; i++) cfg->stdio[i] = setup->stdio[i];
    for (int i = 0; i < setup->extra_fd_count && i < XSBT_MAX_SOURCES; i++) extra[i] = setup->extra_fds[i];
    cfg->extra_fds = extra;
    cfg->extra_fd_count = (size_t)setup->extra_fd_count;
    cfg->exec_fd = setup->exec_fd;
}

static int arrange_body(const void *context, struct xsbt_outcome *out) {
    const struct xsbt_fd_case *setup = context;
    if (xsbt_open_sources(setup) != 0) return -errno;
    struct xsb_spawn_config cfg = {0};
    int extra[XSBT_MAX_SOURCES];
    fd_config(setup, &cfg, extra);
    int program = xsb_payload_arrange_fds(&cfg, XSBT_FAIL_FD);
    xsbt_snapshot_fds(out);
    return program;
}

int xsbt_arrange_payload_fds(const struct xsbt_fd_case *setup, struct xsbt_outcome *out) {
    return xsbt_run_forked(arrange_body, NULL, setup, out);
}

struct keep_context {
    const struct xsbt_fd_case *setup;
    const int32_t *keep;
    int32_t count;
};

static int keep_body(const void *context, struct xsbt_outcome *out) {
    const struct keep_context *c = context;
    if (xsbt_open_sources(c->setup) != 0) return -errno;
    // The failure channel stays (the init reports on it), like the init's control socket.
    int keep[XSBT_FD_SLOTS + 1];
    int count = 0;
    for (int i = 0; i < c->count && i < XSBT_FD_SLOTS; i++) keep[count++] = c->keep[i];
    keep[count++] = XSBT_FAIL_FD;
    xsb_init_keep_only(XSBT_FAIL_FD, keep, (size_t)count);
    xsbt_snapshot_fds(out);
    return 0;
}

int xsbt_keep_only(const struct xsbt_fd_case *setup, const int32_t *keep, int32_t count, struct xsbt_outcome *out) {
    struct keep_context context = {setup, keep, count};
    return xsbt_run_forked(keep_body, NULL, &context, out);
}

static int place_body(const void *context, struct xsbt_outcome *out) {
    const struct xsbt_fd_case *setup = context;
    if (setup->source_count < 3 || xsbt_open_sources(setup) != 0) return -EINVAL;
    struct xsb_passed_fds passed = {0};
    for (int i = 2; i < setup->source_count - 1; i++) passed.host[passed.count++] = setup->source_fds[i];
    const char *failed = NULL;
    int result = xsb_place_init_fds(setup->source_fds[0], setup->source_fds[1], &passed,
                                    setup->source_fds[setup->source_count - 1], &failed);
    if (failed != NULL) xsb_copy_string(out->text, sizeof out->text, failed);
    xsbt_snapshot_fds(out);
    return result;
}

int xsbt_place_init_fds(const struct xsbt_fd_case *setup, struct xsbt_outcome *out) {
    return xsbt_run_forked(place_body, NULL, setup, out);
}
