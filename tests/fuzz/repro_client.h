/* A client of a live server that speaks the protocol by hand, for the reproducers of
 * fuzz_server's findings (tests/fuzz/repro_*.c): sessions, records, a described call, and the
 * check they end with: another client's module load must be answered. */
#ifndef MPSSHIM_FUZZ_REPRO_CLIENT_H
#define MPSSHIM_FUZZ_REPRO_CLIENT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel/chan.h"
#include "channel/desc.h"
#include "channel/marshal.h"

struct session {
    int sock;
    struct chan c;
};

/* Connects to the server of $MPSSHIM_PIPE_DIRECTORY and makes context 1 on device 0. */
static inline int open_session(struct session *x);
/* Sends one record (on lane 0 when it asks for a reply) of context repro_ctx (1 unless the
 * caller sets it); NULL: no ring room. */
static uint32_t repro_ctx = 1;
static inline struct chan_rec *put(struct session *x, unsigned op, int reply, const void *p,
                                   size_t len);
/* A request answered on lane 0 within `secs`: its result (reply data in out), or -1. */
static inline long request(struct session *x, unsigned op, const void *p, size_t len, unsigned secs,
                           void *out, size_t cap);
/* A described call packed as the shim packs it, answered within 10 s (outputs in out). */
static inline long call(struct session *x, int id, const void *const *argv, int reply, void *out,
                        size_t cap);
/* A new client loads kernels.ptx from dir: 0 when it is answered within 15 s, else 1. */
static inline int load_answered(const char *dir);
/* Client A's session (open_session), or exit 2 saying there is none. */
static inline void open_client_a(struct session *x);
/* `bytes` of client A's device memory (cuMemAlloc), or exit 2 saying there is none. */
static inline CUdeviceptr alloc_client_a(struct session *x, size_t bytes);

static uint64_t repro_deadline;
static inline int repro_before_deadline(void *arg)
{
    (void)arg;
    return chan_now_ns() < repro_deadline;
}

static inline int open_session(struct session *x)
{
    const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir ? dir : CHAN_DEFAULT_PIPE_DIR,
             CHAN_SOCKET_NAME);
    x->sock = socket(AF_UNIX, SOCK_STREAM, 0);
    if (x->sock < 0 || connect(x->sock, (struct sockaddr *)&sa, sizeof(sa)) != 0) return -1;
    struct chan_hello h = chan_hello_make(SHIM_SYMBOLS_HASH, getpid());
    snprintf(h.head.exe, sizeof(h.head.exe), "repro");
    struct chan_welcome w;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &w, .iov_len = sizeof(w)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    int fd = -1;
    if (send(x->sock, &h, sizeof(h), 0) != sizeof(h) ||
        recvmsg(x->sock, &m, MSG_WAITALL) != (ssize_t)sizeof(w) || w.status != CHAN_WELCOME_OK)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof(int));
    void *base =
        fd < 0 ? MAP_FAILED : mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return -1;
    close(fd);
    chan_attach(&x->c, base);
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    return request(x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), 10, NULL, 0) == 0 ? 0 : -1;
}

static inline struct chan_rec *put(struct session *x, unsigned op, int reply, const void *p,
                                   size_t len)
{
    struct chan_wait wt = {.spin_ns = 1000, .alive = repro_before_deadline};
    repro_deadline = chan_now_ns() + 10000000000ull;
    struct chan_rec *r = chan_ring_reserve(&x->c, (uint32_t)(sizeof(*r) + len), &wt);
    if (!r) return NULL;
    r->op = (uint16_t)op;
    r->flags = reply ? CHAN_RF_REPLY : 0;
    r->lane = 0;
    r->thread = 1;
    r->ctx = repro_ctx;
    memcpy(r + 1, p, len);
    chan_ring_publish(&x->c, r);
    return r;
}

static inline long request(struct session *x, unsigned op, const void *p, size_t len, unsigned secs,
                           void *out, size_t cap)
{
    uint32_t seq0 = atomic_load(&x->c.lanes[0].seq);
    if (!put(x, op, 1, p, len)) return -1;
    struct chan_wait wt = {.spin_ns = 1000, .alive = repro_before_deadline};
    repro_deadline = chan_now_ns() + secs * 1000000000ull;
    if (chan_lane_wait(&x->c, 0, seq0, &wt) != 0) return -1;
    if (out) memcpy(out, x->c.lanes[0].data, x->c.lanes[0].len < cap ? x->c.lanes[0].len : cap);
    return x->c.lanes[0].result;
}

static inline long call(struct session *x, int id, const void *const *argv, int reply, void *out,
                        size_t cap)
{
    static uint8_t buf[4096];
    size_t rlen;
    CUresult err;
    size_t n = chan_pack_call(&shim_calls[id], argv, buf, sizeof(buf), &rlen, &err);
    if (err != CUDA_SUCCESS) return err;
    if (!reply) return put(x, (unsigned)id, 0, buf, n) ? 0 : -1;
    return request(x, (unsigned)id, buf, n, 10, out, cap);
}

static inline int load_answered(const char *dir)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/kernels.ptx", dir);
    FILE *f = fopen(path, "rb");
    static uint8_t img[1 << 16];
    size_t n = f ? fread(img, 1, sizeof(img) - 1, f) : 0;
    if (f) fclose(f);
    struct session b;
    if (!n || open_session(&b) != 0) {
        fprintf(stderr, "no kernels.ptx in %s, or no session for client B\n", dir);
        exit(2);
    }
    img[n++] = 0;
    put(&b, CHAN_OP_BLOB, 0, img, n);
    struct chan_module_load ml = {.kind = CHAN_IMAGE_MODULE, .image_size = n};
    long r = request(&b, CHAN_OP_MODULE_LOAD, &ml, sizeof(ml), 15, NULL, 0);
    if (r < 0) {
        printf("FAIL: client B's module load got no answer in 15 s (it waits at the code "
               "gate for a wait of client A's that A's release never ended)\n");
        return 1;
    }
    printf("PASS: client B's module load answered (%s)\n", shim_error_name((CUresult)r));
    return 0;
}

static inline void open_client_a(struct session *x)
{
    if (open_session(x) != 0) {
        fprintf(stderr, "no session for client A\n");
        exit(2);
    }
}

static inline CUdeviceptr alloc_client_a(struct session *x, size_t bytes)
{
    CUdeviceptr d = 0, *pd = &d;
    const void *aa[] = {&pd, &bytes};
    if (call(x, SHIM_ID_cuMemAlloc_v2, aa, 1, &d, sizeof(d)) != 0 || !d) {
        fprintf(stderr, "client A has no device memory\n");
        exit(2);
    }
    return d;
}

#endif
