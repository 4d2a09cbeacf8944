// One-shot timers as descriptors (timerfd), so that a deadline is one more event on an epoll
// set rather than a timer of Dispatch's, whose manager thread a timer wakes twice.
#include <errno.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "xsb_system.h"

int xsb_one_shot_timer(long milliseconds) {
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (fd < 0) return -errno;
    if (milliseconds < 1) milliseconds = 1;  // an all-zero it_value would disarm it
    struct itimerspec spec = {.it_value = {.tv_sec = milliseconds / 1000, .tv_nsec = (milliseconds % 1000) * 1000000L}};
    if (timerfd_settime(fd, 0, &spec, NULL) != 0) {
        int saved = errno;
        close(fd);
        return -saved;
    }
    return fd;
}
