// Naming the supervisor's own threads (what ps and top show). pthread_setname_np needs
// _GNU_SOURCE, which Swift's Glibc module is not built with.
#define _GNU_SOURCE
#include <pthread.h>

#include "xsb_supervisor_support.h"

int xsb_set_thread_name(const char *name) { return pthread_setname_np(pthread_self(), name); }

