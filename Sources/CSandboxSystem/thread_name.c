// A thread's name (what ps and top show), set and read with prctl: Swift cannot call the
// variadic prctl, and the other way, writing /proc/thread-self/comm, leaves dentries under
// /proc/PID/task/TID that make the process's exit slow for whoever reaps it (DetachedThread.swift).
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>

#include "xsb_system.h"

int xsb_name_this_thread(const char *name) {
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = '\0';
    return prctl(PR_SET_NAME, (unsigned long)truncated, 0, 0, 0) == 0 ? 0 : -errno;
}

int xsb_this_thread_name(char name[16]) {
    memset(name, 0, 16);
    return prctl(PR_GET_NAME, (unsigned long)name, 0, 0, 0) == 0 ? 0 : -errno;
}
