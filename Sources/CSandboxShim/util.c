// Plain-memory helpers for the clone child, and step names for messages.
#define _GNU_SOURCE
#include "child.h"

size_t xsb_string_length(const char *s) {
    size_t n = 0;
    if (s == NULL) return 0;
    while (s[n] != '\0') n++;
    return n;
}

void xsb_copy_string(char *dst, size_t size, const char *src) {
    size_t i = 0;
    if (size == 0) return;
    if (src != NULL) {
        for (; i + 1 < size && src[i] != '\0'; i++) dst[i] = src[i];
    }
    dst[i] = '\0';
}

int xsb_join_path(char *dst, size_t size, const char *prefix, const char *suffix) {
    size_t a = xsb_string_length(prefix), b = xsb_string_length(suffix);
    if (a + b + 1 > size) return -1;
    for (size_t i = 0; i < a; i++) dst[i] = prefix[i];
    for (size_t i = 0; i < b; i++) dst[a + i] = suffix[i];
    dst[a + b] = '\0';
    return 0;
}

const char *xsb_step_name(int step) {
    static const char *const names[XSB_STEP_COUNT] = {
        [XSB_STEP_NONE] = "none",
        [XSB_STEP_SOCKETPAIR] = "control socket",
        [XSB_STEP_CLONE] = "clone3 into new namespaces",
        [XSB_STEP_USERNS_MAP] = "user namespace id mapping",
        [XSB_STEP_CGROUP_ATTACH] = "cgroup attach",
        [XSB_STEP_HANDSHAKE] = "supervisor handshake",
        [XSB_STEP_PARENT_DEATH_SIGNAL] = "parent death signal",
        [XSB_STEP_CGROUP_NAMESPACE] = "cgroup namespace",
        [XSB_STEP_HOSTNAME] = "hostname",
        [XSB_STEP_LOOPBACK] = "loopback interface",
        [XSB_STEP_MOUNT_PRIVATE] = "private mount propagation",
        [XSB_STEP_ROOT_TMPFS] = "root tmpfs",
        [XSB_STEP_PIVOT_ROOT] = "pivot_root",
        [XSB_STEP_BIND_MOUNT] = "bind mount",
        [XSB_STEP_TMPFS_MOUNT] = "tmpfs mount",
        [XSB_STEP_PROC_MOUNT] = "/proc mount",
        [XSB_STEP_DEV_SETUP] = "/dev setup",
        [XSB_STEP_FILE_CREATE] = "file creation",
        [XSB_STEP_SYMLINK] = "symlink",
        [XSB_STEP_ROOT_READONLY] = "read-only root",
        [XSB_STEP_SPAWN_PAYLOAD] = "payload spawn",
        [XSB_STEP_SESSION] = "new session",
        [XSB_STEP_SIGNALS] = "signal reset",
        [XSB_STEP_FILE_DESCRIPTORS] = "file descriptors",
        [XSB_STEP_WORKING_DIRECTORY] = "working directory",
        [XSB_STEP_RLIMIT] = "resource limit",
        [XSB_STEP_CAPABILITIES] = "capability drop",
        [XSB_STEP_NO_NEW_PRIVS] = "no_new_privs",
        [XSB_STEP_SECCOMP] = "seccomp filter",
        [XSB_STEP_EXEC] = "execve",
        [XSB_STEP_TIMEOUT] = "setup timeout",
        [XSB_STEP_INIT_PRIVACY] = "hiding the init from the sandbox",
        [XSB_STEP_MEMORY_DENY_WRITE_EXECUTE] = "memory-deny-write-execute (PR_SET_MDWE)",
        [XSB_STEP_INIT_EXEC] = "sandbox init (xsb-init) start",
        [XSB_STEP_LAUNCH_DESCRIPTION] = "launch description",
    };
    if (step < 0 || step >= XSB_STEP_COUNT || names[step] == NULL) return "unknown step";
    return names[step];
}
