/* File descriptors over the socket; see fdpass.h. */
#define _GNU_SOURCE
#include "channel/fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

int chan_send_fd(int sock, const void *buf, size_t len, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(cbuf, 0, sizeof(cbuf));
        m.msg_control = cbuf;
        m.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(sock, &m, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len ? 0 : -1;
}

int chan_recv_fd(int sock, void *buf, size_t len, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    *fd = -1;
    size_t got = 0;
    while (got < len) {
        iov.iov_base = (char *)buf + got;
        iov.iov_len = len - got;
        ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                memcpy(fd, CMSG_DATA(c), sizeof(int));
        m.msg_control = NULL; /* only the first part carries one */
        m.msg_controllen = 0;
        got += (size_t)n;
    }
    return 0;
}
