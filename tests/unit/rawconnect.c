/* The raw client's modes that misbehave at the connection itself (tests/unit/rawclient.c):
 * another protocol version, garbage records after the handshake, a silent client, a hello
 * trickled a byte a second, and a crowd of connections that never say hello. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/unit/rawclient.h"

/* Waits up to secs for the server to hang up on s, and says whether it did: 0 if so. */
static int hung_up(int s, int secs)
{
    struct timeval tv = {.tv_sec = secs};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b;
    ssize_t n = recv(s, &b, 1, 0);
    printf("server %s\n", n == 0 ? "hung up" : "kept the connection");
    return n == 0 ? 0 : 1;
}

int raw_version(void)
{
    int s = raw_dial();
    struct chan_hello h = raw_hello();
    h.head.major = 99;
    h.head.minor = 7;
    struct chan_welcome w;
    int fd;
    if (send(s, &h, sizeof(h), 0) != sizeof(h) || raw_recv_welcome(s, &w, &fd) != 0) {
        fprintf(stderr, "no welcome\n");
        return 1;
    }
    printf("%s\n", w.message);
    char mine[32], theirs[32];
    snprintf(mine, sizeof(mine), "client protocol 99.7");
    snprintf(theirs, sizeof(theirs), "server protocol %u.%u", CHAN_PROTO_MAJOR, CHAN_PROTO_MINOR);
    return w.status == CHAN_WELCOME_VERSION && fd < 0 && strstr(w.message, mine) &&
                   strstr(w.message, theirs)
               ? 0
               : 1;
}

int raw_garbage(void)
{
    int s = raw_dial();
    struct chan_hello h = raw_hello();
    struct chan_welcome w;
    int fd;
    if (send(s, &h, sizeof(h), 0) != sizeof(h) || raw_recv_welcome(s, &w, &fd) != 0 ||
        w.status != CHAN_WELCOME_OK || fd < 0) {
        fprintf(stderr, "handshake failed\n");
        return 1;
    }
    void *base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return 1;
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
    return hung_up(s, 10);
}

int raw_silent(void)
{
    return hung_up(raw_dial(), 20);
}

int raw_trickle(void)
{
    int s = raw_dial();
    struct chan_hello h = raw_hello();
    const char *b = (const char *)&h;
    for (size_t i = 0; i < sizeof(h); i++) {
        if (send(s, b + i, 1, MSG_NOSIGNAL) != 1) break; /* hung up: what we want */
        struct timeval tv = {.tv_sec = 1};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char c;
        ssize_t n = recv(s, &c, 1, 0);
        if (n == 0) {
            printf("server hung up after %zu bytes of the hello\n", i + 1);
            return i + 1 < 15 ? 0 : 1; /* 5 s of time, one byte a second */
        }
    }
    printf("server kept the connection\n");
    return 1;
}

int raw_crowd(int n, int secs)
{
    int held = 0;
    for (int i = 0; i < n; i++)
        held += raw_connect() >= 0;
    printf("holding %d silent connections\n", held);
    fflush(stdout);
    sleep((unsigned)secs);
    return 0;
}
