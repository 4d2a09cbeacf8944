// userns.c's case: the supervisor maps a new user namespace's ids; its init becomes them.
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "forked_child.h"

struct map_context {
    struct xsb_spawn_config cfg;
    int map_twice;
};

static int map_body(const void *context, struct xsbt_outcome *out) {
    const struct map_context *c = context;
    char byte = 0;
    int unshared = unshare(CLONE_NEWUSER);
    if (send(XSBT_SYNC_FD, &byte, 1, 0) != 1 || unshared != 0) return -1;
    // The parent has written our maps (or failed to).
    if (recv(XSBT_SYNC_FD, &byte, 1, 0) != 1) return -1;
    xsb_init_become_mapped_ids(&c->cfg, XSBT_FAIL_FD);
    xsb_init_hide_from_sandbox(XSBT_FAIL_FD);
    uid_t r, e, s;
    gid_t gr, ge, gs;
    if (syscall(SYS_getresuid, &r, &e, &s) != 0 || syscall(SYS_getresgid, &gr, &ge, &gs) != 0) return -1;
    out->values[0] = r, out->values[1] = e, out->values[2] = s;
    out->values[3] = gr, out->values[4] = ge, out->values[5] = gs;
    out->values[6] = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    return 0;
}

/// Parent side: maps the child, reads its maps back, lets it go on.
static void map_parent(pid_t child, int sync_fd, const void *context, struct xsbt_outcome *out) {
    const struct map_context *c = context;
    char byte = 0;
    if (recv(sync_fd, &byte, 1, 0) != 1) return;
    char detail[128] = "";
    out->values[7] = xsb_userns_map_ids(child, &c->cfg, detail, sizeof detail);
    if (c->map_twice) {
        detail[0] = '\0';
        out->values[8] = xsb_userns_map_ids(child, &c->cfg, detail, sizeof detail);
    }
    static const char *const files[] = {"uid_map", "gid_map", "setgroups"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[64], text[256];
        snprintf(path, sizeof path, "/proc/%d/%s", (int)child, files[i]);
        if (xsbt_read_text(path, text, sizeof text) != 0) text[0] = '\0';
        xsbt_append(out->text, sizeof out->text, "== ");
        xsbt_append(out->text, sizeof out->text, files[i]);
        xsbt_append(out->text, sizeof out->text, "\n");
        xsbt_append(out->text, sizeof out->text, text);
    }
    xsbt_append(out->text, sizeof out->text, "== detail\n");
    xsbt_append(out->text, sizeof out->text, detail);
    (void)send(sync_fd, &byte, 1, 0);
}

int xsbt_map_ids(uint32_t uid_inside, uint32_t uid_outside, uint32_t gid_inside, uint32_t gid_outside, int map_twice,
                 struct xsbt_outcome *out) {
    struct map_context context = {.map_twice = map_twice};
    context.cfg.uid_inside = uid_inside;
    context.cfg.uid_outside = uid_outside;
    context.cfg.gid_inside = gid_inside;
    context.cfg.gid_outside = gid_outside;
    return xsbt_run_forked(map_body, map_parent, &context, out);
}
