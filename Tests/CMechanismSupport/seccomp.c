// seccomp.c's payload side: memory-deny-write-execute, the listener's number announced, the
// filter loaded with its listener there.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "forked_child.h"

#ifndef PR_GET_MDWE
#define PR_GET_MDWE 66
#endif

static int filter_body(const void *context, struct xsbt_outcome *out) {
    const struct xsbt_filter_case *setup = context;
    for (int fd = 0; fd < setup->open_below; fd++) {
        if (open("/dev/null", O_RDWR) != fd) return -1;
    }
    // The receiver's pipe, out of the way of the listener's number.
    int announce[2];
    if (pipe(announce) != 0) return -1;
    int reader = fcntl(announce[0], F_DUPFD_CLOEXEC, 500), writer = fcntl(announce[1], F_DUPFD_CLOEXEC, 500);
    close(announce[0]);
    close(announce[1]);
    if (reader < 0 || writer < 0) return -1;
    if (setup->open_files_limit > 0) {
        struct rlimit limit = {.rlim_cur = (rlim_t)setup->open_files_limit, .rlim_max = (rlim_t)setup->open_files_limit};
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
    }
    static const unsigned char allow[8] = {0x06, 0, 0, 0, 0, 0, 0xff, 0x7f};  // RET ALLOW
    struct xsb_spawn_config cfg = {0};
    cfg.bpf = allow;
    cfg.bpf_instructions = setup->no_filter ? 0 : 1;
    cfg.memory_deny_write_execute = setup->memory_deny_write_execute;

    xsb_payload_deny_write_execute(&cfg, XSBT_FAIL_FD);
    out->values[0] = prctl(PR_GET_MDWE, 0L, 0L, 0L, 0L);
    int listener = xsb_payload_announce_listener(&cfg, XSBT_FAIL_FD, writer);
    out->values[1] = listener;
    int32_t heard = -1;
    if (read(reader, &heard, sizeof heard) != (ssize_t)sizeof heard) return -1;
    out->values[2] = heard;
    xsb_payload_load_filter(&cfg, XSBT_FAIL_FD, listener + (setup->expect_elsewhere ? 1 : 0));
    char link[64] = "";
    char path[32] = "/proc/self/fd/";
    xsbt_append_number(path, sizeof path, listener);
    ssize_t n = readlink(path, link, sizeof link - 1);
    link[n > 0 ? n : 0] = '\0';
    out->values[3] = xsb_string_length(link) > 0 && __builtin_strcmp(link, "anon_inode:seccomp notify") == 0;
    return 0;
}

int xsbt_seccomp_payload(const struct xsbt_filter_case *setup, struct xsbt_outcome *out) {
    return xsbt_run_forked(filter_body, NULL, setup, out);
}
