// control.c's case that needs a process: the init carrying out a SIGNAL request on the
// payload's process group.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "forked_child.h"

int xsbt_serve_signal_request(int32_t signal, struct xsbt_outcome *out) {
    *out = (struct xsbt_outcome){0};
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return -errno;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
        int err = errno;
        close(pair[0]);
        close(pair[1]);
        return -err;
    }
    pid_t payload = fork();
    if (payload == 0) {
        // A process group of its own, like the payload's session, and signals as a payload has
        // them (the test thread's mask is not its); then wait to be signalled.
        setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (signal > 0 && signal < 65 && signal != SIGKILL && signal != SIGSTOP) {
            struct sigaction dfl = {.sa_handler = SIG_DFL};
            sigaction(signal, &dfl, NULL);
        }
        char byte = 1;
        (void)write(ready[1], &byte, 1);
        for (int i = 0; i < 200; i++) {
            struct timespec tick = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
            nanosleep(&tick, NULL);
        }
        _exit(0);
    }
    int forked = payload < 0 ? errno : 0;
    close(ready[1]);
    char byte;
    if (payload > 0 && read(ready[0], &byte, 1) != 1) forked = EPIPE;
    close(ready[0]);
    if (forked != 0) {
        if (payload > 0) {
            kill(payload, SIGKILL);
            waitpid(payload, NULL, 0);
        }
        close(pair[0]);
        close(pair[1]);
        return -forked;
    }
    struct xsb_msg request = {.type = XSB_MSG_SIGNAL, .value = signal};
    struct xsb_msg ack = {0};
    int err = 0;
    if (send(pair[0], &request, sizeof request, 0) != (ssize_t)sizeof request) err = errno;
    if (err == 0) out->values[0] = xsb_control_serve_request(pair[1], payload);
    if (err == 0 && recv(pair[0], &ack, sizeof ack, 0) != (ssize_t)sizeof ack) err = errno;
    out->values[1] = ack.type;
    out->values[2] = ack.value;
    out->values[3] = ack.value2;
    kill(payload, SIGKILL);  // a request that signalled nothing leaves it sleeping
    int status = 0;
    while (waitpid(payload, &status, 0) < 0 && errno == EINTR) {}
    out->values[4] = status;
    close(pair[0]);
    close(pair[1]);
    return -err;
}

int xsbt_send_msg_with_fd(int control_fd, uint32_t type, int fd) {
    struct xsb_msg msg = {.type = type};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control = {0};
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof msg};
    struct msghdr header = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&header);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(control_fd, &header, MSG_NOSIGNAL) == (ssize_t)sizeof msg ? 0 : -errno;
}
