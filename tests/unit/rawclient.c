/* A client that speaks the wire protocol by hand, to test how the server treats bad input:
 *   rawclient version   hello with another protocol version: must be refused, naming both
 *   rawclient garbage   valid handshake, then malformed records: the server must drop this
 *                       client (and keep serving others)
 *   rawclient silent    connects and says nothing: the server must time the handshake out
 * Exit 0 when the server behaved as it must. Uses $MPSSHIM_PIPE_DIRECTORY. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "channel/chan.h"
#include "channel/desc.h"

static int dial(void)
{
    const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir ? dir : CHAN_DEFAULT_PIPE_DIR,
             CHAN_SOCKET_NAME);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("connect");
        exit(2);
    }
    return s;
}

static int recv_welcome(int s, struct chan_welcome *w, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = w, .iov_len = sizeof(*w)};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                       .msg_controllen = sizeof(cbuf)};
    *fd = -1;
    ssize_t n = recvmsg(s, &m, MSG_WAITALL);
    if (n != (ssize_t)sizeof(*w))
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

static struct chan_hello hello(void)
{
    struct chan_hello h = {.magic = CHAN_MAGIC, .major = CHAN_PROTO_MAJOR,
                           .minor = CHAN_PROTO_MINOR, .symbols_hash = SHIM_SYMBOLS_HASH,
                           .pid = getpid()};
    snprintf(h.exe, sizeof(h.exe), "rawclient");
    return h;
}

static int version(void)
{
    int s = dial();
    struct chan_hello h = hello();
    h.major = 99;
    h.minor = 7;
    struct chan_welcome w;
    int fd;
    if (send(s, &h, sizeof(h), 0) != sizeof(h) || recv_welcome(s, &w, &fd) != 0) {
        fprintf(stderr, "no welcome\n");
        return 1;
    }
    printf("%s\n", w.message);
    char mine[32], theirs[32];
    snprintf(mine, sizeof(mine), "client protocol 99.7");
    snprintf(theirs, sizeof(theirs), "server protocol %u.%u", CHAN_PROTO_MAJOR,
             CHAN_PROTO_MINOR);
    return w.status == CHAN_WELCOME_VERSION && fd < 0 && strstr(w.message, mine) &&
                   strstr(w.message, theirs)
               ? 0
               : 1;
}

static int garbage(void)
{
    int s = dial();
    struct chan_hello h = hello();
    struct chan_welcome w;
    int fd;
    if (send(s, &h, sizeof(h), 0) != sizeof(h) || recv_welcome(s, &w, &fd) != 0 ||
        w.status != CHAN_WELCOME_OK || fd < 0) {
        fprintf(stderr, "handshake failed\n");
        return 1;
    }
    void *base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return 1;
    /* The segment is sealed: the client cannot shrink it under the server. */
    if (ftruncate(fd, 4096) == 0) {
        fprintf(stderr, "segment could be shrunk\n");
        return 1;
    }
    struct chan c;
    chan_attach(&c, base);
    struct chan_wait wt = {.spin_ns = 1000};
    /* 1: a record with an unknown operation; 2: a tail that jumps past the ring. */
    struct chan_rec *r = chan_ring_reserve(&c, 64, &wt);
    r->op = 0x7fff;
    chan_ring_publish(&c, r);
    atomic_store(&c.shm->tail, atomic_load(&c.shm->tail) + ((uint64_t)CHAN_RING_SIZE << 4));
    atomic_fetch_add(&c.shm->doorbell, 1);
    chan_futex_wake(&c.shm->doorbell);
    /* The server must hang up on us. */
    struct timeval tv = {.tv_sec = 10};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b;
    ssize_t n = recv(s, &b, 1, 0);
    printf("server %s\n", n == 0 ? "hung up" : "kept the connection");
    return n == 0 ? 0 : 1;
}

static int silent(void)
{
    int s = dial();
    struct timeval tv = {.tv_sec = 20};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b;
    ssize_t n = recv(s, &b, 1, 0);
    printf("server %s\n", n == 0 ? "hung up" : "kept the connection");
    return n == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "version") == 0)
        return version();
    if (argc == 2 && strcmp(argv[1], "garbage") == 0)
        return garbage();
    if (argc == 2 && strcmp(argv[1], "silent") == 0)
        return silent();
    fprintf(stderr, "usage: rawclient version|garbage|silent\n");
    return 2;
}
