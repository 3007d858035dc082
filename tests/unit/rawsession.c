/* The raw client's connection to the server (tests/unit/rawclient.c lists its modes): the
 * socket, the handshake, a session's segment, one request or described call on it, module
 * images uploaded, and the lines its checks print. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel/marshal.h"
#include "tests/unit/rawclient.h"

int raw_failures;
uint64_t raw_give_up_at;

int raw_before_deadline(void *arg)
{
    (void)arg;
    return chan_now_ns() < raw_give_up_at;
}

int raw_connect(void)
{
    const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir ? dir : CHAN_DEFAULT_PIPE_DIR,
             CHAN_SOCKET_NAME);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    return s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? s : -1;
}

int raw_dial(void)
{
    int s = raw_connect();
    if (s < 0) {
        perror("connect");
        exit(2);
    }
    return s;
}

int raw_recv_welcome(int s, struct chan_welcome *w, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = w, .iov_len = sizeof(*w)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    *fd = -1;
    ssize_t n = recvmsg(s, &m, MSG_WAITALL);
    if (n != (ssize_t)sizeof(*w)) return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

struct chan_hello raw_hello(void)
{
    struct chan_hello h = chan_hello_make(SHIM_SYMBOLS_HASH, getpid());
    snprintf(h.head.exe, sizeof(h.head.exe), "rawclient");
    return h;
}

int raw_session_open_hello(struct raw_session *x, const struct chan_hello *h)
{
    x->sock = raw_dial();
    struct chan_welcome w;
    int fd;
    if (send(x->sock, h, sizeof(*h), 0) != sizeof(*h) || raw_recv_welcome(x->sock, &w, &fd) != 0 ||
        w.status != CHAN_WELCOME_OK || fd < 0)
        return -1;
    x->size = w.shm_size;
    x->base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (x->base == MAP_FAILED) return -1;
    chan_attach(&x->c, x->base);
    return 0;
}

int raw_session_open_visible(struct raw_session *x, const char *visible)
{
    struct chan_hello h = raw_hello();
    if (visible) {
        h.visible_set = 1;
        snprintf(h.visible_devices, sizeof(h.visible_devices), "%s", visible);
    }
    return raw_session_open_hello(x, &h);
}

int raw_session_open(struct raw_session *x)
{
    return raw_session_open_visible(x, NULL);
}

CUresult raw_request(struct raw_session *x, unsigned op, const void *payload, size_t len, void *out,
                     size_t cap)
{
    struct chan_wait wt = {.spin_ns = 1000, .alive = raw_before_deadline};
    raw_give_up_at = chan_now_ns() + 10000000000ull;
    struct chan_rec *r = chan_ring_reserve(&x->c, (uint32_t)(sizeof(*r) + len), &wt);
    if (!r) return CUDA_ERROR_UNKNOWN;
    r->op = (uint16_t)op;
    r->flags = CHAN_RF_REPLY;
    r->lane = 0;
    r->thread = 1;
    r->ctx = 1;
    memcpy(r + 1, payload, len);
    uint32_t seq0 = atomic_load(&x->c.lanes[0].seq);
    chan_ring_publish(&x->c, r);
    if (chan_lane_wait(&x->c, 0, seq0, &wt) != 0)
        return CUDA_ERROR_UNKNOWN; /* no answer in 10 s: the server is gone or stuck */
    struct chan_lane *l = &x->c.lanes[0];
    if (out) memcpy(out, l->data, l->len < cap ? l->len : cap);
    return (CUresult)l->result;
}

CUresult raw_call(struct raw_session *x, int id, const void *const *argv, void *out, size_t cap)
{
    uint8_t buf[4096];
    size_t rlen;
    CUresult err;
    size_t n = chan_pack_call(&shim_calls[id], argv, buf, sizeof(buf), &rlen, &err);
    if (err != CUDA_SUCCESS) return err;
    return raw_request(x, (unsigned)id, buf, n, out, cap);
}

int raw_blob(struct raw_session *x, const void *data, size_t n)
{
    struct chan_wait wt = {.spin_ns = 1000, .alive = raw_before_deadline};
    const size_t max = CHAN_REC_MAX - sizeof(struct chan_rec);
    for (size_t off = 0; off < n; off += max) {
        size_t k = n - off < max ? n - off : max;
        raw_give_up_at = chan_now_ns() + 10000000000ull;
        struct chan_rec *rec = chan_ring_reserve(&x->c, (uint32_t)(sizeof(*rec) + k), &wt);
        if (!rec) return -1;
        rec->op = CHAN_OP_BLOB;
        rec->flags = 0;
        rec->ctx = 1;
        memcpy(rec + 1, (const uint8_t *)data + off, k);
        chan_ring_publish(&x->c, rec);
    }
    return 0;
}

void raw_expect_refused(const char *what, CUresult r)
{
    printf("%-58s %s\n", what,
           r == CUDA_SUCCESS         ? "ACCEPTED"
           : r == CUDA_ERROR_UNKNOWN ? "NO ANSWER"
                                     : "refused");
    raw_failures += r == CUDA_SUCCESS || r == CUDA_ERROR_UNKNOWN;
}

void raw_expect(const char *what, CUresult got, CUresult want)
{
    printf("%-58s %s\n", what, got == want ? "as expected" : shim_error_name(got));
    raw_failures += got != want;
}

int raw_session_with_ctx(struct raw_session *x)
{
    if (raw_session_open(x) != 0) {
        fprintf(stderr, "no session\n");
        return -1;
    }
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (raw_request(x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "no context\n");
        return -1;
    }
    return 0;
}
