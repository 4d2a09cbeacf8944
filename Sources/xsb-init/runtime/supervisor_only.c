// glibc functions that only the supervisor's side of the shim calls (launch descriptions are
// built in calloc'd memory, the id maps' paths with snprintf): the shim's objects are linked
// whole into xsb-init, so they must be defined, but the init never reaches them. If it did,
// that would be a bug: end at once, loudly, rather than run on without what they do.
#include "runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>

void xsb_rt_supervisor_only(void) {
    xsb_rt_exit_group(127);
}

void *calloc(size_t count, size_t size) {
    (void)count;
    (void)size;
    xsb_rt_supervisor_only();
}

void free(void *p) {
    (void)p;
    xsb_rt_supervisor_only();
}

int snprintf(char *restrict s, size_t n, const char *restrict format, ...) {
    (void)s;
    (void)n;
    (void)format;
    xsb_rt_supervisor_only();
}
