// Naming the supervisor's own threads (what ps and top show). pthread_setname_np needs
// _GNU_SOURCE, which Swift's Glibc module is not built with.
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>

#include "xsb_shim.h"

int xsb_set_thread_name(const char *name) { return pthread_setname_np(pthread_self(), name); }

// The raw system call changes only the calling thread's credentials; glibc's setgroups() would
// change every thread of the process.
int xsb_clear_thread_groups(void) { return syscall(SYS_setgroups, 0, NULL) == 0 ? 0 : errno; }
