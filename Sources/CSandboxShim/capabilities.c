// Capabilities. The clone child has every capability in the new user namespace and keeps them
// across its exec of the init as ambient ones; the init builds the sandbox with them; the
// payload drops all of them (and locks the "root is special" rules off) before its exec.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#define XSB_SECURE_BITS                                                                              \
    (SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED | \
     SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

const char *xsb_keep_capabilities_across_exec(int cap_last_cap) {
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &header, caps) != 0) return "capget";
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) caps[i].inheritable = caps[i].permitted;
    if (syscall(SYS_capset, &header, caps) != 0) return "capset (inheritable)";
    for (int cap = 0; cap <= cap_last_cap; cap++) {
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) return "ambient capabilities";
    }
    return NULL;
}

void xsb_payload_drop_capabilities(const struct xsb_spawn_config *cfg, int status_fd) {
    // Lock the "root is special" rules off before the sets are emptied, so nothing regains a
    // capability through uid 0 semantics or ambient raising later.
    if (prctl(PR_SET_SECUREBITS, XSB_SECURE_BITS, 0, 0, 0) != 0) xsb_payload_fail(status_fd, XSB_STEP_CAPABILITIES, "securebits");
    // Up to the kernel's last capability, whatever cap_last_cap said: EINVAL marks the end.
    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
        if (errno == EINVAL && cap > cfg->cap_last_cap) break;
        xsb_payload_fail(status_fd, XSB_STEP_CAPABILITIES, "bounding set");
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) xsb_payload_fail(status_fd, XSB_STEP_CAPABILITIES, "ambient set");
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    for (size_t i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) data[i].effective = data[i].permitted = data[i].inheritable = 0;
    if (syscall(SYS_capset, &header, data) != 0) xsb_payload_fail(status_fd, XSB_STEP_CAPABILITIES, "capset");
}

void xsb_payload_set_no_new_privs(int status_fd) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) xsb_payload_fail(status_fd, XSB_STEP_NO_NEW_PRIVS, "prctl");
}
